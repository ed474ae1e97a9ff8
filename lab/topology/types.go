package topology

import (
	"net/netip"
	"time"

	"github.com/latticelab/lattice/internal/strictyaml"
)

// Every name in a topology has the pattern tag ^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$:
// it becomes a host name, a node name registered with control and a
// pcapng interface name.

// Topology is a topology file: the network to emulate and what runs on it.
type Topology struct {
	Version     int    `yaml:"version" min:"1" max:"1" doc:"Format version. If omitted, 1."`
	Name        string `yaml:"name" pattern:"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$" doc:"The topology's name, in reports. If omitted, the file's base name."`
	Description string `yaml:"description" doc:"What this topology is for, in a sentence or two."`
	Seed        uint64 `yaml:"seed" doc:"Seeds every random decision of the fabric (NAT ports, impairments), so runs repeat. If zero, 1."`

	Networks []Network `yaml:"networks,keyed" required:"true" doc:"Network segments by name. A network with an uplink is joined to it by a gateway router, which NATs when nat is set." example:"networks: {internet: {cidr: 203.0.113.0/24}, home: {cidr: 192.168.1.0/24, uplink: internet, nat: port-restricted-cone}}"`
	Routers  []Router  `yaml:"routers,keyed" doc:"Explicit routers, for shapes gateways cannot express (a router joining three networks, static routes). Most topologies need none." example:"routers: {core: {interfaces: [{network: a, addr: 10.0.0.1}, {network: b, addr: 10.1.0.1}]}}"`
	Hosts    []Host    `yaml:"hosts,keyed" doc:"Explicit hosts, for services that share a machine or hosts with several interfaces. Nodes and services given a network get a host of their own." example:"hosts: {server: {network: internet, addr: 203.0.113.100, aliases: [203.0.113.101]}}"`

	Control *Control `yaml:"control" doc:"The control service, with its embedded NATS server (registration and signaling). Required when there are nodes."`
	Relays  []Relay  `yaml:"relays,keyed" doc:"LRP relays by name. Nodes are told about every relay." example:"relays: {relay: {host: server, port: 443}}"`
	STUN    []STUN   `yaml:"stun,keyed" doc:"STUN servers by name, for nodes' server-reflexive candidates." example:"stun: {stun: {host: server, port: 3478}}"`
	DNS     []DNS    `yaml:"dns,keyed" doc:"DNS servers by name: each answers A and AAAA queries for every host, node and service of the topology as NAME.lab, and with dns64 is the DNS64 an IPv6-only network behind nat: nat64 needs." example:"dns: {dns64: {host: server, dns64: 64:ff9b::/96}}"`

	Defaults NodeDefaults `yaml:"defaults" doc:"Settings every node gets unless it says otherwise."`
	Nodes    []Node       `yaml:"nodes,keyed" doc:"Lattice nodes by name: regular nodes, or sandboxes when sandbox is set." example:"nodes: {alice: {network: home}, agent: {network: office, sandbox: pod}}"`
}

// DocYAML implements the schema's type description.
func (*Topology) DocYAML() string {
	return "A lattice-lab topology: networks, NAT routers, hosts, services and Lattice nodes, built in-process on the emulation fabric."
}

// Network is a segment.
type Network struct {
	Name  string       `yaml:",key" pattern:"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$" doc:"Names are 1-40 lower-case letters, digits and dashes, starting with a letter."`
	CIDR  netip.Prefix `yaml:"cidr" doc:"The network's IPv4 prefix, e.g. 192.168.1.0/24. Networks behind different NATs may reuse a prefix. Required unless cidr6 is given (an IPv6-only network)." example:"192.168.1.0/24"`
	CIDR6 netip.Prefix `yaml:"cidr6" ipv6:"true" doc:"The network's IPv6 prefix, e.g. 2001:db8:1::/64: with cidr a dual-stack network, whose every interface also gets the IPv6 address at its IPv4 address's offset (192.168.1.2 → 2001:db8:1::2); alone an IPv6-only one. IPv6 is never translated, so IPv6 prefixes must not overlap." example:"2001:db8:1::/64"`
	MTU   int          `yaml:"mtu" min:"576" max:"9000" doc:"Largest IP packet on the segment. If zero, 1500."`

	Uplink   string     `yaml:"uplink" doc:"The network this one reaches the rest of the world through. A gateway router joins the two; it NATs when nat is set, otherwise it routes and the networks above learn a route to this one."`
	NAT      *NAT       `yaml:"nat" doc:"NAT on the gateway's uplink: a profile name, or a mapping of RFC 4787 knobs (optionally starting from a profile)." example:"port-restricted-cone"`
	Firewall *Firewall  `yaml:"firewall" doc:"Stateless filter on packets leaving through the gateway's uplink."`
	Gateway  netip.Addr `yaml:"gateway" doc:"The gateway router's address on this network. If omitted, the first address of cidr."`
	Public   netip.Addr `yaml:"public" doc:"The gateway router's address on the uplink network (the NAT's public address). If omitted, the next free address there."`
	Router   string     `yaml:"router" pattern:"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$" doc:"The gateway router's name. If omitted, NAME-nat with a NAT, NAME-gw without."`
	Link     *Link      `yaml:"link" doc:"Impairments of the gateway's uplink: the site's access link."`
}

// NAT is a NAT's behaviour.
type NAT struct {
	Profile   string `yaml:"profile,shorthand" enum:"full-cone|restricted-cone|port-restricted-cone|symmetric|cgnat|udp-blocked|ipv6-firewall|nat64" doc:"A named NAT type; the other keys change it. If omitted, an endpoint-independent NAT with port preservation. ipv6-firewall translates nothing: the gateway routes and filters IPv6 as an RFC 6092 home router (inbound only through flows opened from inside; filtering and the timeouts apply to it). nat64, on an IPv6-only network with an IPv4 uplink, translates IPv6 to prefix64 (64:ff9b::/96) into IPv4 from the gateway's address (RFC 6146: endpoint-independent mapping and filtering; port_range, the timeouts and max_mappings apply). Every other profile also filters the network's IPv6 that way."`
	Mapping   string `yaml:"mapping" enum:"endpoint-independent|address-dependent|address-and-port-dependent" doc:"When two outbound flows share an external endpoint (RFC 4787 section 4.1)."`
	Filtering string `yaml:"filtering" enum:"endpoint-independent|address-dependent|address-and-port-dependent" doc:"Which remotes may send in through a mapping (RFC 4787 section 5)."`
	Ports     string `yaml:"ports" enum:"preserve|sequential|random" doc:"How external ports are picked (RFC 4787 section 4.2.1)."`
	PortRange string `yaml:"port_range" pattern:"^[0-9]{1,5}-[0-9]{1,5}$" doc:"External ports, LO-HI. If omitted, 1024-65535." example:"20000-29999"`
	Hairpin   *bool  `yaml:"hairpin" doc:"Whether inside hosts reach each other through the public address (RFC 4787 REQ-9)."`

	UDPTimeout           time.Duration `yaml:"udp_timeout" doc:"Idle lifetime of a UDP mapping. If zero, 2m."`
	TCPTimeout           time.Duration `yaml:"tcp_timeout" doc:"Idle lifetime of an established TCP mapping. If zero, 2h4m."`
	TCPTransitoryTimeout time.Duration `yaml:"tcp_transitory_timeout" doc:"Idle lifetime of an opening or closing TCP mapping. If zero, 4m."`
	ICMPTimeout          time.Duration `yaml:"icmp_timeout" doc:"Idle lifetime of an ICMP echo mapping. If zero, 60s."`
	Refresh              string        `yaml:"refresh" enum:"outbound|both" doc:"Which packets keep a mapping alive. If omitted, outbound."`
	MaxMappings          int           `yaml:"max_mappings" min:"0" max:"1000000" doc:"Live mappings the NAT holds at most; new flows beyond are dropped. If zero, unlimited (nat64: 65536)."`
	Prefix64             netip.Prefix  `yaml:"prefix64" ipv6:"true" doc:"nat64 only: the /96 IPv4 addresses are embedded in (RFC 6052). If omitted, the well-known 64:ff9b::/96." example:"64:ff9b::/96"`
}

// Firewall is a first-match rule list.
type Firewall struct {
	Default string `yaml:"default" enum:"allow|deny" doc:"What happens to packets no rule matches. If omitted, allow."`
	Rules   []Rule `yaml:"rules" doc:"Tried in order; the first that matches decides."`
}

// Rule is one firewall rule.
type Rule struct {
	Action string       `yaml:"action" required:"true" enum:"allow|deny" doc:"What the rule does."`
	Proto  string       `yaml:"proto" enum:"any|tcp|udp|icmp" doc:"The protocol it matches. If omitted, any."`
	To     netip.Prefix `yaml:"to" doc:"Destinations it matches. If omitted, every destination."`
	Ports  []PortRange  `yaml:"ports" doc:"Destination ports it matches: numbers or LO-HI ranges. If omitted, every port." example:"[53, 8000-8999]"`
}

// Impairments are what a link does to packets, in one direction.
type Impairments struct {
	Latency      time.Duration       `yaml:"latency" max:"10s" doc:"One-way delay added to every packet."`
	Jitter       time.Duration       `yaml:"jitter" max:"10s" doc:"Uniform random variation of the delay (never reorders)."`
	Loss         strictyaml.Fraction `yaml:"loss" doc:"Share of packets dropped: 0.01 or 1%."`
	Duplicate    strictyaml.Fraction `yaml:"duplicate" doc:"Share of packets delivered twice."`
	Reorder      strictyaml.Fraction `yaml:"reorder" doc:"Share of packets held back so later ones overtake them."`
	ReorderDelay time.Duration       `yaml:"reorder_delay" max:"10s" doc:"How long a reordered packet is held back. If zero, 1ms."`
	Rate         Rate                `yaml:"rate" doc:"Bandwidth, e.g. 100Mbit or 1.5Gbit. If omitted, unlimited."`
	Queue        strictyaml.Size     `yaml:"queue" doc:"Bytes waiting for the bandwidth limiter before tail drop. If zero, what rate carries in 50ms."`
	MTU          int                 `yaml:"mtu" min:"0" max:"9000" doc:"Packets longer than this are dropped. If zero, no limit."`
	Down         bool                `yaml:"down" doc:"The link starts unplugged."`
}

// Link is a link's impairments: the top-level keys apply to both
// directions, egress and ingress override them per direction.
type Link struct {
	Impairments `yaml:",inline"`
	Egress      *Impairments `yaml:"egress" doc:"Impairments of packets leaving the interface, instead of the shared ones."`
	Ingress     *Impairments `yaml:"ingress" doc:"Impairments of packets arriving at the interface, instead of the shared ones."`
}

// Router is an explicit router.
type Router struct {
	Name       string      `yaml:",key" pattern:"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$" doc:"Names are 1-40 lower-case letters, digits and dashes, starting with a letter."`
	Interfaces []Interface `yaml:"interfaces" required:"true" doc:"Its attachments, at least two."`
	Gateway    netip.Addr  `yaml:"gateway" doc:"The default route's next hop. If omitted, no default route."`
	Routes     []Route     `yaml:"routes" doc:"Static routes besides the connected ones."`
	Uplink     string      `yaml:"uplink" doc:"The network of the interface NAT and firewall apply to. If omitted, the gateway's."`
	NAT        *NAT        `yaml:"nat" doc:"NAT on the uplink."`
	Firewall   *Firewall   `yaml:"firewall" doc:"Filter on packets leaving through the uplink."`
}

// Interface attaches a host or router to a network.
type Interface struct {
	Network string       `yaml:"network" required:"true" doc:"The network to attach to."`
	Addr    netip.Addr   `yaml:"addr" doc:"The interface's address. If omitted, the next free one."`
	Aliases []netip.Addr `yaml:"aliases" doc:"Further addresses on the interface (an RFC 5780 STUN server needs two)."`
	MTU     int          `yaml:"mtu" min:"576" max:"9000" doc:"If zero, the network's."`
	Link    *Link        `yaml:"link" doc:"Impairments of this attachment."`
}

// Route is a static route.
type Route struct {
	To  netip.Prefix `yaml:"to" required:"true" doc:"Destination prefix."`
	Via netip.Addr   `yaml:"via" required:"true" doc:"Next hop, on one of the host's networks."`
}

// Host is an explicit machine.
type Host struct {
	Name       string `yaml:",key" pattern:"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$" doc:"Names are 1-40 lower-case letters, digits and dashes, starting with a letter."`
	Placement  `yaml:",inline"`
	Kind       string      `yaml:"kind" enum:"inprocess|netns" doc:"inprocess (a gVisor stack, no privileges) or netns (a real Linux network namespace joined to the fabric through a TUN device: the kernel's own TCP/IP, one interface, a default route; needs root). If omitted, inprocess."`
	Interfaces []Interface `yaml:"interfaces" doc:"Several attachments, instead of network and addr."`
	Gateway    netip.Addr  `yaml:"gateway" doc:"The default route's next hop. If omitted, its network's gateway router."`
	Routes     []Route     `yaml:"routes" doc:"Static routes besides the connected ones and the default."`
}

// Placement says where a host, or the host of its own a node or service
// gets, attaches.
type Placement struct {
	Network string       `yaml:"network" doc:"The network the host attaches to."`
	Addr    netip.Addr   `yaml:"addr" doc:"Its address there. If omitted, the next free one."`
	Aliases []netip.Addr `yaml:"aliases" doc:"Further addresses on the same interface."`
	Link    *Link        `yaml:"link" doc:"Impairments of the host's link to its network."`
}

// Service placement: on a declared host, or on a host of its own.
type Service struct {
	Host      string `yaml:"host" doc:"The host the service runs on."`
	Placement `yaml:",inline"`
}

// Control is the control service.
type Control struct {
	Service       `yaml:",inline"`
	Port          uint16        `yaml:"port" min:"1" doc:"The embedded NATS server's TCP port (nodes register there). If zero, 4222. Use 443 to pass firewalls that allow only web ports."`
	HTTPPort      uint16        `yaml:"http_port" min:"1" doc:"Serve HTTP registration (POST /v1/register) on this TCP port. If zero, no HTTP."`
	Token         string        `yaml:"token" pattern:"^[!-~]{16,512}$" doc:"The join token nodes present. If omitted, a fixed lab token."`
	TokenTTL      time.Duration `yaml:"token_ttl" min:"1s" max:"8760h" doc:"The join token expires this long after the lab starts: control then refuses new registrations with it, while nodes that joined before keep working. If zero, it never expires."`
	RelayTokenTTL time.Duration `yaml:"relay_token_ttl" min:"1s" max:"8760h" doc:"How long each relay token control issues is valid; nodes must renew theirs before it expires. If zero, 24h."`
}

// Relay is an LRP relay.
type Relay struct {
	Name    string `yaml:",key" pattern:"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$" doc:"Names are 1-40 lower-case letters, digits and dashes, starting with a letter."`
	Service `yaml:",inline"`
	Port    uint16 `yaml:"port" min:"1" doc:"UDP (QUIC) and TCP port. If zero, 443."`
}

// STUN is a STUN server.
type STUN struct {
	Name      string `yaml:",key" pattern:"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$" doc:"Names are 1-40 lower-case letters, digits and dashes, starting with a letter."`
	Service   `yaml:",inline"`
	Port      uint16     `yaml:"port" min:"1" doc:"UDP port. If zero, 3478."`
	Alternate netip.Addr `yaml:"alternate" doc:"A second address of the host: the server then also answers on it and on port+1, serving RFC 5780 behaviour discovery."`
}

// DNS is a DNS server (lab/dns).
type DNS struct {
	Name    string `yaml:",key" pattern:"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$" doc:"Names are 1-40 lower-case letters, digits and dashes, starting with a letter."`
	Service `yaml:",inline"`
	Port    uint16       `yaml:"port" min:"1" doc:"UDP port. If zero, 53."`
	DNS64   netip.Prefix `yaml:"dns64" ipv6:"true" doc:"Synthesize AAAA records under this IPv6 /96 for names that have only A records (RFC 6147), and answer ipv4only.arpa (RFC 7050), so that IPv6-only hosts behind a NAT64 with this prefix64 find IPv4-only servers. If omitted, no synthesis." example:"64:ff9b::/96"`
}

// NodeDefaults apply to every node that does not set them.
type NodeDefaults struct {
	RelayTransport string `yaml:"relay_transport" enum:"tcp|quic|race" doc:"How nodes reach relays. If omitted, tcp."`
	ICE            *ICE   `yaml:"ice" doc:"ICE and path-selection tuning."`
	Link           *Link  `yaml:"link" doc:"Impairments of every node's own link (nodes that set link keep theirs)."`
}

// ICE tunes path selection.
type ICE struct {
	AttemptTimeout time.Duration `yaml:"attempt_timeout" min:"100ms" max:"1h" doc:"Bound on one ICE attempt. If zero, 10s."`
	RetryMin       time.Duration `yaml:"retry_min" min:"100ms" max:"1h" doc:"Shortest wait between direct attempts. If zero, 2s."`
	RetryMax       time.Duration `yaml:"retry_max" min:"100ms" max:"1h" doc:"Longest wait between direct attempts. If zero, 60s."`
	DeadAfter      time.Duration `yaml:"dead_after" min:"100ms" max:"1h" doc:"Silence after which an idle direct path falls back to the relay (one carrying traffic falls back within about a second). If zero, 20s."`
	RelayOnly      *bool         `yaml:"relay_only" doc:"Never try a direct path."`
	Lazy           *bool         `yaml:"lazy" doc:"Negotiate a peer's direct path only while traffic flows to or from it; the relay carries the rest."`
	IdleTimeout    time.Duration `yaml:"idle_timeout" min:"1s" max:"24h" doc:"With lazy: quiet time after which a peer's direct path closes. If zero, 5m."`
	AlwaysDirect   []string      `yaml:"always_direct" doc:"With lazy: peers (node names) whose direct path is negotiated at once."`
}

// Node is a Lattice node, or a sandbox when Sandbox is set.
type Node struct {
	Name      string `yaml:",key" pattern:"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$" doc:"Names are 1-40 lower-case letters, digits and dashes, starting with a letter."`
	Host      string `yaml:"host" doc:"A declared host to run on, instead of a host of its own."`
	Placement `yaml:",inline"`
	Count     int      `yaml:"count" min:"1" max:"1000" doc:"Run this many alike nodes, named NAME-1 … NAME-N (zero-padded), each on a host of its own. If zero, 1."`
	Roams     []string `yaml:"roams" doc:"Further networks the node can move to (a scenario's move step), like a laptop leaving home for a café. It gets a host on each, named NODE-NETWORK, whose link it uses once moved."`

	Sandbox        *Sandbox `yaml:"sandbox" doc:"Run the node as a sandbox: pod (in-process netstack, no privileges) or gvisor (Pro; the agent in runsc over the kernel wg0 of a network namespace of its own; needs root and runsc)." example:"pod"`
	Start          *bool    `yaml:"start" doc:"Start with the topology. If false, only a scenario's start step starts it. If omitted, true."`
	ListenPort     uint16   `yaml:"listen_port" min:"1" doc:"The node's UDP port (ICE and WireGuard). If zero, 51820."`
	RelayTransport string   `yaml:"relay_transport" enum:"tcp|quic|race" doc:"How the node reaches relays. If omitted, the default's."`
	ICE            *ICE     `yaml:"ice" doc:"ICE tuning for this node, over the defaults."`
	MTU            int      `yaml:"mtu" min:"576" max:"9000" doc:"The overlay interface's MTU (not for sandboxes). If zero, 1420: a 1500-byte path less WireGuard's 80 bytes. On a path with a smaller MTU and no working PMTU discovery, 80 less than that (1200 across 1280)."`
}

// Sandbox is a node's sandbox options.
type Sandbox struct {
	Mode         string   `yaml:"mode,shorthand" required:"true" enum:"pod|gvisor" doc:"pod: the overlay on an in-process netstack, reached through SOCKS5/HTTP proxies. gvisor: WireGuard on a kernel wg0 in the node's own network namespace and the agent in a runsc container (no proxies, no forwards; peers reach its listeners directly)."`
	SOCKS5       string   `yaml:"socks5" doc:"The SOCKS5 proxy's listen address on the sandbox's host. If omitted, 127.0.0.1:1080; off turns it off." example:"127.0.0.1:1080"`
	HTTPProxy    string   `yaml:"http_proxy" doc:"The HTTP proxy's listen address. If omitted, none." example:"127.0.0.1:3128"`
	EgressPolicy string   `yaml:"egress_policy" doc:"An egress policy file, relative to the topology file (Pro)."`
	Forwards     []string `yaml:"forwards" doc:"Inbound forwards PORT=HOST:PORT from the overlay to the sandbox's host (Pro)." example:"8080=127.0.0.1:80"`
}
