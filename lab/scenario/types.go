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
	Requires    []string      `yaml:"requires" enum:"pro|root|gvisor|virtual" doc:"What the scenario needs: pro (the Pro edition), root, gvisor (runsc), virtual (the virtual clock: a scenario of hours of network time, which the wall clock would take hours to run). Without it the scenario is skipped with the reason."`
	Timeout     time.Duration `yaml:"timeout" min:"1s" max:"24h" doc:"Bound on the whole scenario, bring-up included, in network time. If zero, 2m."`
	Clock       string        `yaml:"clock" enum:"virtual|real" doc:"The clock the scenario runs on: virtual (a testing/synctest bubble under go test: time moves only when the whole lab waits, so timers cost no wall time and runs repeat) or real (the wall clock). Kernel hosts (kind: netns) and gvisor sandboxes need real. If omitted, virtual where the scenario and the build allow it, else real."`
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
// a name and a background id. Each field tagged oneof:"action" is a step
// type (an Action); its yaml key is the step's name.
type Step struct {
	Name       string `yaml:"name" doc:"A label for the step in progress output and reports. If omitted, one is made from the action."`
	Background string `yaml:"background" pattern:"^[a-z0-9][a-z0-9_-]{0,39}$" doc:"Run the step in the background under this id; the next steps start at once, and a join step waits for it."`

	WaitPath     *PathCheck    `yaml:"wait_path" oneof:"action" doc:"Wait until from's path to to is the given one. relay means settled on the relay: ICE tried and failed, or a direct path was lost."`
	AssertPath   *PathHold     `yaml:"assert_path" oneof:"action" doc:"Check from's path to to now, and that it stays so for a while."`
	Ping         *Ping         `yaml:"ping" oneof:"action" doc:"UDP echo round trips from one node to another over the overlay."`
	Fetch        *Fetch        `yaml:"fetch" oneof:"action" doc:"HTTP GET from a node over the overlay. Every node serves http://NODE/ (port 80) answering \"hello from NODE\", and /bytes/N with N bytes."`
	TCPIdle      *TCPIdle      `yaml:"tcp_idle" oneof:"action" doc:"Open a TCP connection from a node's host to a host outside, through its NATs, leave it idle, and check whether a message still gets through."`
	Presence     *Presence     `yaml:"wait_presence" oneof:"action" doc:"Wait until a node shows a peer online or offline (control's presence)."`
	Transfer     *Transfer     `yaml:"transfer" oneof:"action" doc:"Send bytes over TCP through the overlay and check their SHA-256 on arrival; report the throughput."`
	Stream       *Stream       `yaml:"stream" oneof:"action" doc:"Stream bytes over TCP through the overlay while a block of steps (a fault) runs; check every frame's SHA-256 and the whole stream's, and report bytes lost, duplicated and corrupted, reconnects and the longest stall."`
	TimeToDirect *TimeToDirect `yaml:"time_to_direct" oneof:"action" doc:"Measure how long after both nodes were up the pair went direct."`
	FullMesh     *FullMesh     `yaml:"full_mesh" oneof:"action" doc:"Wait until every pair of running nodes has a path (each knows the other and WireGuard completed a handshake); print the table."`
	AssertMetric *AssertMetric `yaml:"assert_metric" oneof:"action" doc:"Scrape a node's metrics (the collector lattice up serves on /metrics, gathered in process) and compare one metric with a value."`

	Start   *Start        `yaml:"start" oneof:"action" doc:"Start a node or service."`
	Stop    *Stop         `yaml:"stop" oneof:"action" doc:"Stop a node or service (a node keeps its identity for a later start)."`
	Restart *Restart      `yaml:"restart" oneof:"action" doc:"Stop and start a node or service."`
	Refused *StartRefused `yaml:"start_refused" oneof:"action" doc:"Start a node and check that it is refused (an expired join token), with an error containing the given text; the node stays stopped."`
	Move    *Move         `yaml:"move" oneof:"action" doc:"Move a node to another network it roams (see the node's roams): its socket moves, its connections break, its address changes."`

	LinkDown   *LinkDown   `yaml:"link_down" oneof:"action" doc:"Unplug a link: every packet both ways is dropped."`
	LinkUp     *LinkUp     `yaml:"link_up" oneof:"action" doc:"Plug a link back in."`
	Impair     *Impair     `yaml:"impair" oneof:"action" doc:"Replace a link's impairments; no impairment keys makes it perfect again."`
	BlockUDP   *BlockUDP   `yaml:"block_udp" oneof:"action" doc:"Make a NAT router drop every outbound UDP packet (a corporate firewall tightening up)."`
	UnblockUDP *UnblockUDP `yaml:"unblock_udp" oneof:"action" doc:"Give a NAT router its original firewall back."`
	NATReboot  *NATReboot  `yaml:"nat_reboot" oneof:"action" doc:"Reboot a NAT: every mapping is lost."`
	AdvanceClk *Advance    `yaml:"advance_clock" oneof:"action" doc:"Move the NAT clock forward, expiring idle mappings."`
	Blackhole  *Blackhole  `yaml:"blackhole_direct" oneof:"action" doc:"Drop UDP between two nodes' public addresses (their NATs' firewalls): the direct path dies, the relay (TCP) still works."`
	Heal       *Heal       `yaml:"heal_direct" oneof:"action" doc:"Undo blackhole_direct."`
	Sleep      *Sleep      `yaml:"sleep" oneof:"action" doc:"Wait this long." example:"2s"`
	Join       Join        `yaml:"join" oneof:"action" doc:"Wait for the background step with this id and take its result."`
	NATMapping *NATMapping `yaml:"assert_nat_mapping" oneof:"action" doc:"Check whether a node has a live mapping in the NAT of its network, and how old it is."`
	Discover   *Discover   `yaml:"discover_nat" oneof:"action" doc:"Classify a node's NATs with RFC 5780 tests against a STUN server with an alternate address, and compare."`

	SOCKS5Fetch *SOCKS5Fetch `yaml:"socks5_fetch" oneof:"action" doc:"Fetch a URL through a pod sandbox's SOCKS5 proxy, as an agent on the sandbox's host would."`
	Egress      *Egress      `yaml:"egress" oneof:"action" doc:"Ask a pod sandbox to connect somewhere and check its egress policy's verdict (Pro)."`
	Forward     *Forward     `yaml:"forward" oneof:"action" doc:"Connect from a peer to a sandbox's overlay port and check it reaches the forward's target on the sandbox's host (Pro)."`
	AgentRun    *AgentRun    `yaml:"agent_run" oneof:"action" doc:"Run an agent in a gvisor sandbox and check its exit code (gvisor mode: a runsc container over the pod's wg0, peer names in its /etc/hosts)."`
	Exec        *Exec        `yaml:"exec" oneof:"action" doc:"Run a real program in a kernel host's network namespace and check its exit status and output."`

	Repeat *Repeat `yaml:"repeat" oneof:"action" doc:"Run a block of steps several times, in order (a soak's churn)."`
	Steady *Steady `yaml:"steady" oneof:"action" doc:"Run a block of steps and check that the lab's goroutines and live heap end within stated tolerances of where they began (a leak check; the heap in use is reported beside it)."`
}
