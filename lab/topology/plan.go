package topology

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/link"
)

// Plan is a topology resolved into what the lab builds: counts expanded,
// every address assigned, every gateway a router with its NAT, every
// route in place. Building it is where most of a topology's mistakes are
// found, so Parse always builds it.
type Plan struct {
	Name        string
	Description string
	Seed        uint64
	Networks    []PlanNetwork
	Routers     []PlanRouter
	Hosts       []PlanHost
	Control     *PlanService
	Relays      []PlanService
	STUN        []PlanSTUN
	DNS         []PlanDNS
	Nodes       []PlanNode
	// Token is control's join token.
	Token string
	// TokenTTL, if not zero, is how long after the lab's start the join
	// token expires; RelayTokenTTL, if not zero, how long a relay token
	// control issues lasts (else 24h).
	TokenTTL, RelayTokenTTL time.Duration
}

// PlanNetwork is a segment and where it sits in the uplink tree.
type PlanNetwork struct {
	Config fabric.NetworkConfig
	// Uplink is the parent network, "" at the top.
	Uplink string
	// Gateway is the router joining the network to its uplink, "" at the
	// top.
	Gateway string
}

// PlanRouter is a router to build.
type PlanRouter struct {
	Config fabric.RouterConfig
	// Profile names the NAT for people: a profile name, "custom" for
	// knobs without a profile, "" without NAT.
	Profile string
	// For is the network a gateway serves, "" for an explicit router.
	For string
}

// PlanHost is a host to build.
type PlanHost struct {
	Config fabric.HostConfig
	// Kind is "inprocess" or "netns".
	Kind string
	// For names the node or service the host was made for, "" for an
	// explicit host.
	For string
}

// PlanService is a service placed on a host.
type PlanService struct {
	Name string
	Host string
	// Addr is where the service listens (relays: UDP and TCP; STUN: UDP;
	// control and NATS: TCP).
	Addr netip.AddrPort
	// Addr6 is Addr's IPv6 twin where Addr is the IPv4 address of a
	// dual-stack network: the service listens there too. Zero otherwise
	// (Addr is then the service's one address, of either family).
	Addr6 netip.AddrPort
	// HTTP is control's HTTP registration address, if any (on Addr6's
	// address too, where that is set).
	HTTP netip.AddrPort
}

// Addrs lists the service's listen addresses: Addr, then Addr6 if set.
func (s *PlanService) Addrs() []netip.AddrPort {
	if s.Addr6.IsValid() {
		return []netip.AddrPort{s.Addr, s.Addr6}
	}
	return []netip.AddrPort{s.Addr}
}

// PlanDNS is a DNS server.
type PlanDNS struct {
	PlanService
	// DNS64 is the /96 AAAA records are synthesized under, if any.
	DNS64 netip.Prefix
	// Records map every host, node and service name, NAME.lab, to its
	// addresses.
	Records map[string][]netip.Addr
}

// PlanSTUN is a STUN server.
type PlanSTUN struct {
	PlanService
	// Alternate is the RFC 5780 second address and port, if any;
	// Alternate6 its IPv6 twin, as Addr6 is Addr's.
	Alternate, Alternate6 netip.AddrPort
}

// PlanNode is one Lattice node.
type PlanNode struct {
	Name string
	// Group is the declared name a count expanded (equal to Name
	// without count).
	Group string
	Host  string
	// Network is the network of the host's first interface; Addr is the
	// host's address there.
	Network string
	Addr    netip.Addr
	// Sandbox is set for sandboxes; EgressPolicy is an absolute path.
	Sandbox        *Sandbox
	Start          bool
	ListenPort     uint16
	MTU            int // the overlay's; zero: the node's default
	RelayTransport string
	ICE            ICESettings
	// NATs are the NAT routers between the node and the top of its
	// network tree, innermost first.
	NATs []string
	// Roams are the other networks the node can move to.
	Roams []Roam
}

// Roam is a host a roaming node can move to.
type Roam struct {
	Network, Host string
	Addr          netip.Addr
	NATs          []string
}

// ICESettings are a node's resolved ICE tuning; zero durations mean the
// node's defaults.
type ICESettings struct {
	AttemptTimeout, RetryMin, RetryMax, DeadAfter time.Duration
	RelayOnly                                     bool
	Lazy                                          bool          // see node.ICEConfig.Lazy
	IdleTimeout                                   time.Duration // with Lazy
	AlwaysDirect                                  []string      // with Lazy: peer names
}

// Node returns the named node, or nil.
func (p *Plan) Node(name string) *PlanNode {
	for i := range p.Nodes {
		if p.Nodes[i].Name == name {
			return &p.Nodes[i]
		}
	}
	return nil
}

// Router returns the named router, or nil.
func (p *Plan) Router(name string) *PlanRouter {
	for i := range p.Routers {
		if p.Routers[i].Config.Name == name {
			return &p.Routers[i]
		}
	}
	return nil
}

// Host returns the named host, or nil.
func (p *Plan) Host(name string) *PlanHost {
	for i := range p.Hosts {
		if p.Hosts[i].Config.Name == name {
			return &p.Hosts[i]
		}
	}
	return nil
}

// Network returns the named network, or nil.
func (p *Plan) Network(name string) *PlanNetwork {
	for i := range p.Networks {
		if p.Networks[i].Config.Name == name {
			return &p.Networks[i]
		}
	}
	return nil
}

// Group returns the nodes a name means: the node of that name, or every
// node a count expanded from it.
func (p *Plan) Group(name string) []*PlanNode {
	var out []*PlanNode
	for i := range p.Nodes {
		if n := &p.Nodes[i]; n.Name == name || n.Group == name {
			out = append(out, n)
		}
	}
	return out
}

// NATLabel describes what stands between n and the top of its tree:
// "port-restricted-cone", "full-cone behind cgnat", or "none". A NAT that
// also routes the node's IPv6 (filtered, RFC 6092) says so, "symmetric +
// IPv6": nodes there may go direct over IPv6 where the profile alone
// would not, and the report's NAT matrix keeps the two apart. An
// ipv6-firewall gateway, which translates nothing and so is not among
// n.NATs, is named too.
func (p *Plan) NATLabel(n *PlanNode) string {
	routers := n.NATs
	if p.Network(n.Network) != nil {
		routers = nil
		for net := p.Network(n.Network); net != nil && net.Gateway != ""; net = p.Network(net.Uplink) {
			if pr := p.Router(net.Gateway); pr != nil && (slices.Contains(n.NATs, net.Gateway) || strings.HasPrefix(pr.Profile, firewall6Profile)) {
				routers = append(routers, net.Gateway)
			}
		}
	}
	var labels []string
	for _, r := range routers {
		pr := p.Router(r)
		label := pr.Profile
		if pr.Config.NAT != nil && pr.Config.Stateful != nil {
			label += " + IPv6"
		}
		labels = append(labels, label)
	}
	if len(labels) == 0 {
		return "none"
	}
	return strings.Join(labels, " behind ")
}

// Impairments returns one direction of a link's resolved impairments.
func (l *Link) impairments(dir fabric.Direction) link.Impairments {
	if l == nil {
		return link.Impairments{}
	}
	im := l.Impairments
	if dir == fabric.Egress && l.Egress != nil {
		im = *l.Egress
	}
	if dir == fabric.Ingress && l.Ingress != nil {
		im = *l.Ingress
	}
	return im.Link()
}

// Link converts to the fabric's impairments.
func (im Impairments) Link() link.Impairments {
	return link.Impairments{
		Latency: im.Latency, Jitter: im.Jitter,
		Loss: float64(im.Loss), Duplicate: float64(im.Duplicate), Reorder: float64(im.Reorder),
		ReorderDelay: im.ReorderDelay, Rate: link.Rate(im.Rate), QueueBytes: int(im.Queue),
		MTU: im.MTU, Down: im.Down,
	}
}

// NeedsRoot reports whether building the plan needs root: it has hosts
// of kind netns (gvisor sandboxes get one each).
func (p *Plan) NeedsRoot() bool {
	return slices.ContainsFunc(p.Hosts, func(h PlanHost) bool { return h.Kind == "netns" })
}

// AddTo builds the plan's networks, routers and hosts on f. Hosts of kind
// netns become kernel hosts (network namespaces joined through a TUN
// device), which needs root.
func (p *Plan) AddTo(f *fabric.Fabric) error {
	for _, n := range p.Networks {
		if _, err := f.AddNetwork(n.Config); err != nil {
			return fmt.Errorf("network %s: %w", n.Config.Name, err)
		}
	}
	for _, r := range p.Routers {
		if _, err := f.AddRouter(r.Config); err != nil {
			return fmt.Errorf("router %s: %w", r.Config.Name, err)
		}
	}
	for _, h := range p.Hosts {
		var err error
		if h.Kind == "netns" {
			_, err = f.AddKernelHost(fabric.KernelHostConfig{Name: h.Config.Name, Interface: h.Config.Interfaces[0], Gateway: h.Config.Gateway})
		} else {
			_, err = f.AddHost(h.Config)
		}
		if err != nil {
			return fmt.Errorf("host %s: %w", h.Config.Name, err)
		}
	}
	return nil
}
