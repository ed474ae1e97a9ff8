package scenario

import (
	"time"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/topology"
)

// Scenario is a scenario file: a topology and a timeline of steps.
type Scenario struct {
	Version     int           `yaml:"version" min:"1" max:"1" doc:"Format version. If omitted, 1."`
	Name        string        `yaml:"name" pattern:"^[a-z0-9][a-z0-9+._-]{0,79}$" doc:"The scenario's name, in reports and test names. If omitted, the file's base name."`
	Description string        `yaml:"description" doc:"What the scenario shows, in a sentence or two."`
	Topology    TopologyRef   `yaml:"topology" required:"true" doc:"The topology: a path to a topology file (relative to this file), or a topology written inline." example:"../topologies/nat-matrix.yaml"`
	Nodes       []string      `yaml:"nodes" doc:"Start only these nodes (names, or a count's name for all of its nodes) when the topology comes up; the others wait for a start step. If omitted, every node whose start is not false."`
	Tags        []string      `yaml:"tags" pattern:"^[a-z0-9][a-z0-9-]{0,39}$" doc:"Labels for people and reports (the HTML report and JSON carry them)."`
	Requires    []string      `yaml:"requires" enum:"pro|root|gvisor" doc:"What the scenario needs: pro (the Pro edition), root, gvisor (runsc). Without it the scenario is skipped with the reason."`
	Timeout     time.Duration `yaml:"timeout" min:"1s" max:"1h" doc:"Bound on the whole scenario, bring-up included. If zero, 2m."`
	Steps       []Step        `yaml:"steps" required:"true" doc:"The timeline, run in order. A step with background runs alongside the next ones until a join step waits for it."`
}

// DocYAML implements the schema's type description.
func (*Scenario) DocYAML() string {
	return "A lattice-lab scenario: a topology and a timeline of steps that act on it and check what happens."
}

// TopologyRef is a topology file's path or an inline topology.
type TopologyRef struct {
	Path   string
	Inline *topology.Topology
	// File is the decoded topology, Plan its resolution (set by Parse).
	File *topology.File
	Plan *topology.Plan
}

// UnmarshalStrictYAML implements strictyaml.Unmarshaler.
func (r *TopologyRef) UnmarshalStrictYAML(d *strictyaml.Decoder, n strictyaml.Node, path string) {
	switch {
	case strictyaml.IsScalar(n):
		d.Decode(n, reflectValue(&r.Path), path)
	case strictyaml.IsMapping(n):
		r.Inline = &topology.Topology{}
		d.Decode(n, reflectValue(r.Inline), path)
	default:
		d.HintErrorf(n, path, "write topology: ../topologies/NAME.yaml, or the topology's keys under topology:",
			"want a path or a topology, got %s", strictyaml.Describe(n))
	}
}

// JSONSchema implements strictyaml.Schemer.
func (*TopologyRef) JSONSchema(g *strictyaml.Generator) map[string]any {
	return map[string]any{"anyOf": []any{
		map[string]any{"type": "string", "description": "path of a topology file, relative to the scenario"},
		g.Type(reflectType[topology.Topology]()),
	}}
}

// Step is one entry of the timeline: exactly one action, and optionally
// a name and a background id.
type Step struct {
	Name       string `yaml:"name" doc:"A label for the step in progress output and reports. If omitted, one is made from the action."`
	Background string `yaml:"background" pattern:"^[a-z0-9][a-z0-9_-]{0,39}$" doc:"Run the step in the background under this id; the next steps start at once, and a join step waits for it."`

	WaitPath     *PathCheck    `yaml:"wait_path" oneof:"action" doc:"Wait until from's path to to is the given one. relay means settled on the relay: ICE tried and failed, or a direct path was lost."`
	AssertPath   *PathHold     `yaml:"assert_path" oneof:"action" doc:"Check from's path to to now, and that it stays so for a while."`
	Ping         *Ping         `yaml:"ping" oneof:"action" doc:"UDP echo round trips from one node to another over the overlay."`
	Fetch        *Fetch        `yaml:"fetch" oneof:"action" doc:"HTTP GET from a node over the overlay. Every node serves http://NODE/ (port 80) answering \"hello from NODE\", and /bytes/N with N bytes."`
	Transfer     *Transfer     `yaml:"transfer" oneof:"action" doc:"Send bytes over TCP through the overlay and check their SHA-256 on arrival; report the throughput."`
	TimeToDirect *TimeToDirect `yaml:"time_to_direct" oneof:"action" doc:"Measure how long after both nodes were up the pair went direct."`
	FullMesh     *FullMesh     `yaml:"full_mesh" oneof:"action" doc:"Wait until every pair of running nodes has a path (each knows the other and WireGuard completed a handshake); print the table."`

	Start   *Target `yaml:"start" oneof:"action" doc:"Start a node or service."`
	Stop    *Target `yaml:"stop" oneof:"action" doc:"Stop a node or service (a node keeps its identity for a later start)."`
	Restart *Target `yaml:"restart" oneof:"action" doc:"Stop and start a node or service."`
	Move    *Move   `yaml:"move" oneof:"action" doc:"Move a node to another network it roams (see the node's roams): its socket moves, its connections break, its address changes."`

	LinkDown   *LinkRef   `yaml:"link_down" oneof:"action" doc:"Unplug a link: every packet both ways is dropped."`
	LinkUp     *LinkRef   `yaml:"link_up" oneof:"action" doc:"Plug a link back in."`
	Impair     *Impair    `yaml:"impair" oneof:"action" doc:"Replace a link's impairments; no impairment keys makes it perfect again."`
	BlockUDP   *RouterRef `yaml:"block_udp" oneof:"action" doc:"Make a NAT router drop every outbound UDP packet (a corporate firewall tightening up)."`
	UnblockUDP *RouterRef `yaml:"unblock_udp" oneof:"action" doc:"Give a NAT router its original firewall back."`
	NATReboot  *RouterRef `yaml:"nat_reboot" oneof:"action" doc:"Reboot a NAT: every mapping is lost."`
	AdvanceClk *Advance   `yaml:"advance_clock" oneof:"action" doc:"Move the NAT clock forward, expiring idle mappings."`
	Blackhole  *Pair      `yaml:"blackhole_direct" oneof:"action" doc:"Drop UDP between two nodes' public addresses (their NATs' firewalls): the direct path dies, the relay (TCP) still works."`
	Heal       *Pair      `yaml:"heal_direct" oneof:"action" doc:"Undo blackhole_direct."`
	Sleep      *Duration  `yaml:"sleep" oneof:"action" doc:"Wait this long." example:"2s"`
	Join       string     `yaml:"join" oneof:"action" doc:"Wait for the background step with this id and take its result."`
	Discover   *Discover  `yaml:"discover_nat" oneof:"action" doc:"Classify a node's NATs with RFC 5780 tests against a STUN server with an alternate address, and compare."`

	SOCKS5Fetch *SOCKS5Fetch `yaml:"socks5_fetch" oneof:"action" doc:"Fetch a URL through a pod sandbox's SOCKS5 proxy, as an agent on the sandbox's host would."`
	Egress      *Egress      `yaml:"egress" oneof:"action" doc:"Ask a pod sandbox to connect somewhere and check its egress policy's verdict (Pro)."`
	Forward     *Forward     `yaml:"forward" oneof:"action" doc:"Connect from a peer to a sandbox's overlay port and check it reaches the forward's target on the sandbox's host (Pro)."`
	AgentRun    *AgentRun    `yaml:"agent_run" oneof:"action" doc:"Run an agent in a gvisor sandbox and check its exit code (gvisor mode: a runsc container over the pod's wg0, peer names in its /etc/hosts)."`
}

// Duration is a step's bare duration value (sleep: 2s).
type Duration = time.Duration

// PathCheck waits for a path.
type PathCheck struct {
	From   string        `yaml:"from" required:"true" doc:"The node whose view is checked."`
	To     string        `yaml:"to" required:"true" doc:"The peer."`
	Path   string        `yaml:"path" required:"true" enum:"direct|relay" doc:"The expected path."`
	Within time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"How long to wait. If zero, 10s."`
}

// PathHold checks a path now and over time.
type PathHold struct {
	From string        `yaml:"from" required:"true" doc:"The node whose view is checked."`
	To   string        `yaml:"to" required:"true" doc:"The peer."`
	Path string        `yaml:"path" required:"true" enum:"direct|relay" doc:"The expected path."`
	For  time.Duration `yaml:"for" max:"1h" doc:"How long it must hold. If zero, checked once."`
}

// Ping is UDP echo over the overlay.
type Ping struct {
	From    string              `yaml:"from" required:"true" doc:"The sending node."`
	To      string              `yaml:"to" required:"true" doc:"The echoing node (every node echoes UDP on port 7)."`
	Count   int                 `yaml:"count" min:"1" max:"10000" doc:"Round trips. If zero, 5."`
	Within  time.Duration       `yaml:"within" min:"10ms" max:"1h" doc:"Bound on the whole step; the first answer may take retries. If zero, 10s."`
	MaxLoss strictyaml.Fraction `yaml:"max_loss" doc:"Share of round trips that may go unanswered. If omitted, none."`
	MaxRTT  time.Duration       `yaml:"max_rtt" max:"1h" doc:"Fail if the average round trip is longer."`
}

// Fetch is an HTTP GET over the overlay.
type Fetch struct {
	From     string        `yaml:"from" required:"true" doc:"The fetching node."`
	URL      string        `yaml:"url" required:"true" pattern:"^http://[^/]+(/.*)?$" doc:"http://HOST[:PORT]/PATH; HOST is a node's name or overlay address." example:"http://bob/"`
	Status   int           `yaml:"status" min:"100" max:"599" doc:"Expected status. If zero, 200."`
	Contains string        `yaml:"contains" doc:"Text the body must contain."`
	Within   time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"Retry until this long has passed. If zero, 10s."`
}

// Transfer sends bytes through the overlay.
type Transfer struct {
	From          string          `yaml:"from" required:"true" doc:"The sending node."`
	To            string          `yaml:"to" required:"true" doc:"The receiving node."`
	Bytes         strictyaml.Size `yaml:"bytes" required:"true" doc:"How much to send." example:"16MiB"`
	Within        time.Duration   `yaml:"within" min:"10ms" max:"1h" doc:"Bound on the transfer. If zero, 60s."`
	MinThroughput topology.Rate   `yaml:"min_throughput" doc:"Fail below this rate." example:"50Mbit"`
}

// TimeToDirect measures a pair's upgrade to a direct path.
type TimeToDirect struct {
	From   string        `yaml:"from" required:"true" doc:"One node."`
	To     string        `yaml:"to" required:"true" doc:"The other."`
	Max    time.Duration `yaml:"max" max:"1h" doc:"Fail if it took longer."`
	Within time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"How long to wait for the direct path. If zero, 10s."`
}

// FullMesh waits for every pair to have a path.
type FullMesh struct {
	Within time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"How long to wait. If zero, 60s."`
	Ping   bool          `yaml:"ping" doc:"Also ping every pair over the overlay once."`
}

// Target names a node or a service.
type Target struct {
	Node    string `yaml:"node" oneof:"target" doc:"A node."`
	Service string `yaml:"service" oneof:"target" doc:"A service: control (with its embedded NATS), or a relay's or STUN server's name."`
}

// Move moves a roaming node.
type Move struct {
	Node string `yaml:"node" required:"true" doc:"The node."`
	To   string `yaml:"to" required:"true" doc:"One of its networks (its own, or one it roams)."`
}

// LinkRef names a link: a node's, a host's, a router's uplink or a
// network's access link (its gateway's uplink), or NAME/IFACE.
type LinkRef struct {
	Link string `yaml:"link,shorthand" required:"true" doc:"A node or host (its first interface), a network (its gateway's uplink), a router (its uplink), or OWNER/INTERFACE."`
}

// Impair replaces a link's impairments.
type Impair struct {
	Link string        `yaml:"link" required:"true" doc:"As in link_down."`
	Set  topology.Link `yaml:",inline"`
}

// RouterRef names a router, or a network by its gateway.
type RouterRef struct {
	Router  string `yaml:"router" oneof:"target" doc:"A router."`
	Network string `yaml:"network" oneof:"target" doc:"A network: its gateway router."`
}

// Advance moves the NAT clock.
type Advance struct {
	By time.Duration `yaml:"by,shorthand" required:"true" min:"1ms" max:"8760h" doc:"How far."`
}

// Pair names two nodes.
type Pair struct {
	Between []string `yaml:"between" required:"true" doc:"The two nodes."`
}

// Discover classifies a node's NATs.
type Discover struct {
	Node      string `yaml:"node" required:"true" doc:"The node whose host runs the tests."`
	STUN      string `yaml:"stun" doc:"The STUN server (one with an alternate address). If omitted, the first such."`
	Mapping   string `yaml:"mapping" enum:"endpoint-independent|address-dependent|address-and-port-dependent" doc:"Expected mapping. If omitted, what the node's NATs are configured to do."`
	Filtering string `yaml:"filtering" enum:"endpoint-independent|address-dependent|address-and-port-dependent" doc:"Expected filtering. If omitted, as configured."`
}

// SOCKS5Fetch fetches through a sandbox's SOCKS5 proxy.
type SOCKS5Fetch struct {
	Node     string        `yaml:"node" required:"true" doc:"The pod sandbox."`
	URL      string        `yaml:"url" required:"true" pattern:"^http://[^/]+(/.*)?$" doc:"What to fetch; the proxy resolves node names." example:"http://web/"`
	Status   int           `yaml:"status" min:"100" max:"599" doc:"Expected status. If zero, 200."`
	Contains string        `yaml:"contains" doc:"Text the body must contain."`
	Auth     *bool         `yaml:"auth" doc:"Send the proxy credentials. If false, the proxy must refuse. If omitted, true."`
	Within   time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"Retry until this long has passed. If zero, 10s."`
}

// Egress checks a sandbox's egress decision.
type Egress struct {
	Node   string `yaml:"node" required:"true" doc:"The pod sandbox."`
	To     string `yaml:"to" required:"true" doc:"HOST:PORT; HOST is a node name or an address." example:"203.0.113.100:80"`
	Expect string `yaml:"expect" required:"true" enum:"allowed|denied" doc:"The expected verdict."`
}

// Forward checks a sandbox's inbound forward.
type Forward struct {
	Node   string        `yaml:"node" required:"true" doc:"The sandbox with the forward."`
	Port   uint16        `yaml:"port" required:"true" min:"1" doc:"The forwarded overlay port."`
	From   string        `yaml:"from" required:"true" doc:"The peer that connects."`
	Within time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"Retry until this long has passed. If zero, 10s."`
}

// AgentRun runs an agent in a gvisor sandbox.
type AgentRun struct {
	Node           string        `yaml:"node" required:"true" doc:"The gvisor sandbox."`
	Argv           []string      `yaml:"argv" required:"true" doc:"The agent's command line: a program of the host (found in its PATH; /bin, /usr, /lib and /etc are mounted read-only) and its arguments. Peer names resolve through the container's /etc/hosts." example:"[curl, -sf, http://web/]"`
	ExitCode       int           `yaml:"exit_code" min:"0" max:"255" doc:"Expected exit status. If omitted, 0."`
	StdoutContains string        `yaml:"stdout_contains" doc:"Text the agent's standard output must contain."`
	Within         time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"How long the agent may run. If zero, 60s."`
}
