package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/topology"
	"github.com/latticelab/lattice/stun"
)

// FaultEnv is what the steps that change the network ask of the lab.
type FaultEnv interface {
	// Move moves a roaming node to another network.
	Move(ctx context.Context, name, network string) error
	// SetLinkDown unplugs (or plugs back in) the link ref names.
	SetLinkDown(ref string, down bool) error
	// Impair replaces a link's impairments.
	Impair(ref string, set topology.Link) error
	// BlockUDP makes a NAT router drop outbound UDP, or restores its
	// firewall, and returns the router's name.
	BlockUDP(ref RouterRef, block bool) (string, error)
	// RebootNAT drops every mapping of a NAT and returns the router's
	// name and how many it lost.
	RebootNAT(ref RouterRef) (string, int, error)
	// AdvanceClock moves the NAT clock forward.
	AdvanceClock(d time.Duration)
	// Blackhole drops (or lets through again) UDP between two nodes'
	// public addresses.
	Blackhole(a, b string, on bool) error
	// DiscoverNAT classifies a node's NATs (RFC 5780) against the named
	// STUN server, or the first with an alternate address.
	DiscoverNAT(ctx context.Context, name, stunName string) (stun.Result, error)
	// ExpectedNAT is what the node's NATs are configured to do, seen
	// from outside.
	ExpectedNAT(name string) (m, f nat.Behavior, natted bool)
	// NATMappings lists the live mappings of a node's address in the NAT
	// of its own network, whether the node runs or not, and returns the
	// router's name and the NAT clock's now.
	NATMappings(name string) (router string, now time.Time, mappings []nat.MappingInfo, err error)
}

// Move moves a roaming node.
type Move struct {
	Node string `yaml:"node" required:"true" doc:"The node."`
	To   string `yaml:"to" required:"true" doc:"One of its networks (its own, or one it roams)."`
}

func (a *Move) check(k *checker, path string) {
	if !k.node(path+".node", a.Node) {
		return
	}
	n := k.plan.Node(a.Node)
	nets := []string{n.Network}
	for _, r := range n.Roams {
		nets = append(nets, r.Network)
	}
	switch {
	case !slices.Contains(nets, a.To):
		k.errorf(path+".to", fmt.Sprintf("add it to the node's roams (it may move to: %s)", strings.Join(nets, ", ")),
			"node %s cannot move to %q", a.Node, a.To)
	case k.location[a.Node] == a.To:
		k.errorf(path+".to", "", "node %s is on %s already", a.Node, a.To)
	default:
		k.location[a.Node] = a.To
	}
}

// Describe implements Action.
func (a *Move) Describe() string { return fmt.Sprintf("move %s to %s", a.Node, a.To) }

// Run implements Action.
func (a *Move) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	return "", nil, env.Move(ctx, a.Node, a.To)
}

// LinkRef names a link: a node's, a host's, a router's uplink or a
// network's access link (its gateway's uplink), or NAME/IFACE.
type LinkRef struct {
	Link string `yaml:"link,shorthand" required:"true" doc:"A node or host (its first interface), a network (its gateway's uplink), a router (its uplink), or OWNER/INTERFACE."`
}

// LinkDown unplugs a link.
type LinkDown LinkRef

// LinkUp plugs a link back in.
type LinkUp LinkRef

// JSONSchema implements strictyaml.Schemer: a link_down is a LinkRef.
func (*LinkDown) JSONSchema(g *strictyaml.Generator) map[string]any { return schemaOf[LinkRef](g) }

// JSONSchema implements strictyaml.Schemer: a link_up is a LinkRef.
func (*LinkUp) JSONSchema(g *strictyaml.Generator) map[string]any { return schemaOf[LinkRef](g) }

func (a *LinkDown) check(k *checker, path string) { k.link(path, a.Link) }
func (a *LinkUp) check(k *checker, path string)   { k.link(path, a.Link) }

// Describe implements Action.
func (a *LinkDown) Describe() string { return "link down " + a.Link }

// Describe implements Action.
func (a *LinkUp) Describe() string { return "link up " + a.Link }

// Run implements Action.
func (a *LinkDown) Run(_ context.Context, env Env) (string, []report.Metric, error) {
	return "", nil, env.SetLinkDown(a.Link, true)
}

// Run implements Action.
func (a *LinkUp) Run(_ context.Context, env Env) (string, []report.Metric, error) {
	return "", nil, env.SetLinkDown(a.Link, false)
}

func (k *checker) link(path, ref string) {
	if _, _, err := ResolveLink(k.plan, ref); err != nil {
		k.errorf(path+".link", k.linkHint(), "%v", err)
	}
}

// Impair replaces a link's impairments.
type Impair struct {
	Link string        `yaml:"link" required:"true" doc:"As in link_down."`
	Set  topology.Link `yaml:",inline"`
}

func (a *Impair) check(k *checker, path string) {
	k.link(path, a.Link)
	for _, im := range []topology.Impairments{a.Set.Impairments, deref(a.Set.Egress), deref(a.Set.Ingress)} {
		if err := im.Link().Validate(); err != nil {
			k.errorf(path, "", "%v", err)
		}
	}
}

// Describe implements Action.
func (a *Impair) Describe() string { return "impair " + a.Link }

// Run implements Action.
func (a *Impair) Run(_ context.Context, env Env) (string, []report.Metric, error) {
	return "", nil, env.Impair(a.Link, a.Set)
}

func deref(im *topology.Impairments) topology.Impairments {
	if im == nil {
		return topology.Impairments{}
	}
	return *im
}

// RouterRef names a router, or a network by its gateway.
type RouterRef struct {
	Router  string `yaml:"router" oneof:"target" doc:"A router."`
	Network string `yaml:"network" oneof:"target" doc:"A network: its gateway router."`
}

// BlockUDP makes a NAT router drop outbound UDP.
type BlockUDP RouterRef

// UnblockUDP gives a NAT router its firewall back.
type UnblockUDP RouterRef

// NATReboot reboots a NAT.
type NATReboot RouterRef

// JSONSchema implements strictyaml.Schemer: a block_udp is a RouterRef.
func (*BlockUDP) JSONSchema(g *strictyaml.Generator) map[string]any { return schemaOf[RouterRef](g) }

// JSONSchema implements strictyaml.Schemer: an unblock_udp is a RouterRef.
func (*UnblockUDP) JSONSchema(g *strictyaml.Generator) map[string]any { return schemaOf[RouterRef](g) }

// JSONSchema implements strictyaml.Schemer: a nat_reboot is a RouterRef.
func (*NATReboot) JSONSchema(g *strictyaml.Generator) map[string]any { return schemaOf[RouterRef](g) }

func (a *BlockUDP) check(k *checker, path string) {
	if router, ok := k.router(path, RouterRef(*a)); ok {
		if k.blocked[router] {
			k.errorf(path, "", "%s's UDP is already blocked", router)
		}
		k.blocked[router] = true
	}
}

func (a *UnblockUDP) check(k *checker, path string) {
	if router, ok := k.router(path, RouterRef(*a)); ok {
		if !k.blocked[router] {
			k.errorf(path, "block it first with block_udp", "%s's UDP is not blocked", router)
		}
		k.blocked[router] = false
	}
}

func (a *NATReboot) check(k *checker, path string) { k.router(path, RouterRef(*a)) }

// Describe implements Action.
func (a *BlockUDP) Describe() string { return "block udp " + a.Router + a.Network }

// Describe implements Action.
func (a *UnblockUDP) Describe() string { return "unblock udp " + a.Router + a.Network }

// Describe implements Action.
func (a *NATReboot) Describe() string { return "nat reboot " + a.Router + a.Network }

// Run implements Action.
func (a *BlockUDP) Run(_ context.Context, env Env) (string, []report.Metric, error) {
	router, err := env.BlockUDP(RouterRef(*a), true)
	return router + " drops outbound UDP", nil, err
}

// Run implements Action.
func (a *UnblockUDP) Run(_ context.Context, env Env) (string, []report.Metric, error) {
	router, err := env.BlockUDP(RouterRef(*a), false)
	return router + " has its firewall back", nil, err
}

// Run implements Action.
func (a *NATReboot) Run(_ context.Context, env Env) (string, []report.Metric, error) {
	router, lost, err := env.RebootNAT(RouterRef(*a))
	return fmt.Sprintf("%s lost %d mappings", router, lost), nil, err
}

// router resolves a router reference, reporting one that names none.
func (k *checker) router(path string, ref RouterRef) (string, bool) {
	router, err := ResolveRouter(k.plan, ref)
	if err != nil {
		k.errorf(path, k.routerHint(), "%v", err)
		return "", false
	}
	return router, true
}

// Advance moves the NAT clock.
type Advance struct {
	By time.Duration `yaml:"by,shorthand" required:"true" min:"1ms" max:"8760h" doc:"How far."`
}

func (a *Advance) check(*checker, string) {}

// Describe implements Action.
func (a *Advance) Describe() string { return "advance the NAT clock by " + a.By.String() }

// Run implements Action.
func (a *Advance) Run(_ context.Context, env Env) (string, []report.Metric, error) {
	env.AdvanceClock(a.By)
	return "", nil, nil
}

// Pair names two nodes.
type Pair struct {
	Between []string `yaml:"between" required:"true" doc:"The two nodes."`
}

// Blackhole drops UDP between two nodes' public addresses.
type Blackhole Pair

// Heal undoes a Blackhole.
type Heal Pair

// JSONSchema implements strictyaml.Schemer: a blackhole_direct is a Pair.
func (*Blackhole) JSONSchema(g *strictyaml.Generator) map[string]any { return schemaOf[Pair](g) }

// JSONSchema implements strictyaml.Schemer: a heal_direct is a Pair.
func (*Heal) JSONSchema(g *strictyaml.Generator) map[string]any { return schemaOf[Pair](g) }

func (a *Blackhole) check(k *checker, path string) { k.holePair(path, (*Pair)(a), true) }
func (a *Heal) check(k *checker, path string)      { k.holePair(path, (*Pair)(a), false) }

// Describe implements Action.
func (a *Blackhole) Describe() string { return "blackhole direct " + strings.Join(a.Between, " ↔ ") }

// Describe implements Action.
func (a *Heal) Describe() string { return "heal direct " + strings.Join(a.Between, " ↔ ") }

// Run implements Action.
func (a *Blackhole) Run(_ context.Context, env Env) (string, []report.Metric, error) {
	return "", nil, env.Blackhole(a.Between[0], a.Between[1], true)
}

// Run implements Action.
func (a *Heal) Run(_ context.Context, env Env) (string, []report.Metric, error) {
	return "", nil, env.Blackhole(a.Between[0], a.Between[1], false)
}

// holePair checks a blackhole (hole) or heal of the direct path between
// two nodes against what is blackholed at this step.
func (k *checker) holePair(path string, p *Pair, hole bool) {
	if len(p.Between) != 2 {
		k.errorf(path+".between", "", "want two nodes, got %d", len(p.Between))
		return
	}
	a, b := p.Between[0], p.Between[1]
	for i, name := range p.Between {
		if k.plan.Node(name) == nil {
			k.errorf(fmt.Sprintf("%s.between[%d]", path, i+1), k.nodeHint(name), "no node %q", name)
			return
		}
	}
	if a == b {
		k.errorf(path+".between", "", "both are %s", a)
		return
	}
	if len(k.plan.Node(a).NATs) == 0 && len(k.plan.Node(b).NATs) == 0 {
		k.errorf(path, "blackholing uses the NATs' firewalls; put one of the nodes behind a NAT", "neither %s nor %s is behind a NAT", a, b)
		return
	}
	key := [2]string{min(a, b), max(a, b)}
	switch {
	case hole && k.holes[key]:
		k.errorf(path, "", "the direct path between %s and %s is already blackholed", a, b)
	case !hole && !k.holes[key]:
		k.errorf(path, "blackhole it first", "the direct path between %s and %s is not blackholed", a, b)
	}
	k.holes[key] = hole
}

// Discover classifies a node's NATs.
type Discover struct {
	Node      string `yaml:"node" required:"true" doc:"The node whose host runs the tests."`
	STUN      string `yaml:"stun" doc:"The STUN server (one with an alternate address). If omitted, the first such."`
	Mapping   string `yaml:"mapping" enum:"endpoint-independent|address-dependent|address-and-port-dependent" doc:"Expected mapping. If omitted, what the node's NATs are configured to do."`
	Filtering string `yaml:"filtering" enum:"endpoint-independent|address-dependent|address-and-port-dependent" doc:"Expected filtering. If omitted, as configured."`
}

func (a *Discover) check(k *checker, path string) {
	k.node(path+".node", a.Node)
	var names []string
	for _, s := range k.plan.STUN {
		if s.Alternate.IsValid() {
			names = append(names, s.Name)
		}
	}
	switch {
	case len(names) == 0:
		k.errorf(path, "give a STUN server an alternate address", "NAT discovery needs a STUN server with an alternate address")
	case a.STUN != "" && !slices.Contains(names, a.STUN):
		k.errorf(path+".stun", unknownHint(a.STUN, names, "STUN servers with an alternate address"), "no STUN server %q with an alternate address", a.STUN)
	}
}

// Describe implements Action.
func (a *Discover) Describe() string { return "discover " + a.Node + "'s NAT (RFC 5780)" }

// Run implements Action: it classifies the node's NATs and compares with
// what was configured (or is expected).
func (a *Discover) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, 0, 20*time.Second)
	defer cancel()
	res, err := env.DiscoverNAT(ctx, a.Node, a.STUN)
	if err != nil {
		return "", nil, err
	}
	m, f, natted := env.ExpectedNAT(a.Node)
	if a.Mapping != "" {
		m, _ = nat.ParseMapping(a.Mapping)
	}
	if a.Filtering != "" {
		f, _ = nat.ParseFiltering(a.Filtering)
	}
	detail := res.String()
	if res.NATed != natted || (natted && (res.Mapping.String() != m.String() || res.Filtering.String() != f.String())) {
		want := fmt.Sprintf("%s mapping, %s filtering", m, f)
		if !natted {
			want = "no NAT"
		}
		return detail, nil, fmt.Errorf("discovered %s, want %s", detail, want)
	}
	return detail + " (as configured)", nil, nil
}

func (k *checker) linkHint() string {
	return "name a node, host, network or router, or OWNER/INTERFACE"
}

func (k *checker) routerHint() string {
	var names []string
	for _, r := range k.plan.Routers {
		if r.Config.NAT != nil {
			names = append(names, r.Config.Name)
		}
	}
	return "NAT routers: " + strings.Join(names, ", ")
}

// ResolveLink finds the interface a link reference means: a node's or
// host's first interface, a network's access link (its gateway's uplink),
// a router's uplink, or OWNER/INTERFACE.
func ResolveLink(p *topology.Plan, ref string) (owner, iface string, err error) {
	name, ifc, explicit := strings.Cut(ref, "/")
	ifaceOf := func(cfgs []fabric.InterfaceConfig, want string) (string, error) {
		for _, c := range cfgs {
			if c.Name == want {
				return c.Name, nil
			}
		}
		var names []string
		for _, c := range cfgs {
			names = append(names, c.Name)
		}
		return "", fmt.Errorf("%s has no interface %q (it has %s)", name, want, strings.Join(names, ", "))
	}
	if n := p.Node(name); n != nil && !explicit {
		return n.Host, p.Host(n.Host).Config.Interfaces[0].Name, nil
	}
	if h := p.Host(name); h != nil {
		if !explicit {
			return name, h.Config.Interfaces[0].Name, nil
		}
		i, err := ifaceOf(h.Config.Interfaces, ifc)
		return name, i, err
	}
	if r := p.Router(name); r != nil {
		if !explicit {
			ifc = r.Config.Uplink
			if ifc == "" {
				return "", "", fmt.Errorf("router %s has no uplink; name an interface: %s/IFACE", name, name)
			}
		}
		i, err := ifaceOf(r.Config.Interfaces, ifc)
		return name, i, err
	}
	if n := p.Network(name); n != nil && !explicit {
		if n.Gateway == "" {
			return "", "", fmt.Errorf("network %s has no gateway, so no access link; name a host on it", name)
		}
		return n.Gateway, p.Router(n.Gateway).Config.Uplink, nil
	}
	return "", "", fmt.Errorf("no node, host, router or network %q", name)
}

// ResolveRouter finds the NAT router a reference means.
func ResolveRouter(p *topology.Plan, ref RouterRef) (string, error) {
	name := ref.Router
	if ref.Network != "" {
		n := p.Network(ref.Network)
		if n == nil {
			return "", fmt.Errorf("no network %q", ref.Network)
		}
		if n.Gateway == "" {
			return "", fmt.Errorf("network %s has no gateway router", ref.Network)
		}
		name = n.Gateway
	}
	r := p.Router(name)
	switch {
	case r == nil:
		return "", fmt.Errorf("no router %q", name)
	case r.Config.NAT == nil:
		return "", fmt.Errorf("router %s has no NAT", name)
	}
	return name, nil
}

// NATMapping checks a node's mappings in the NAT in front of it
// (assert_nat_mapping).
type NATMapping struct {
	Node   string        `yaml:"node" required:"true" doc:"The node whose mappings are checked, in the NAT of its own network. It may be stopped: its mappings outlive it until they expire."`
	Proto  string        `yaml:"proto" enum:"udp|tcp|icmp" doc:"The mappings' protocol. If omitted, udp."`
	Expect string        `yaml:"expect" required:"true" enum:"present|absent" doc:"present: the node has a live mapping of the protocol; absent: it has none."`
	MinAge time.Duration `yaml:"min_age" max:"8760h" doc:"With present: one of the mappings was made at least this long ago, so it was kept alive rather than made anew."`
}

func (a *NATMapping) check(k *checker, path string) {
	n := k.plan.Node(a.Node)
	switch {
	case n == nil:
		k.errorf(path+".node", k.nodeHint(a.Node), "no node %q", a.Node)
	case len(n.NATs) == 0:
		k.errorf(path+".node", "name a node on a network behind a NAT", "node %s has no NAT in front of it", a.Node)
	}
	if a.MinAge > 0 && a.Expect != "present" {
		k.errorf(path+".min_age", "drop min_age, or expect present", "min_age needs expect: present")
	}
}

func (a *NATMapping) proto() string {
	if a.Proto == "" {
		return "udp"
	}
	return a.Proto
}

// Describe implements Action.
func (a *NATMapping) Describe() string {
	s := fmt.Sprintf("%s's %s mapping is %s", a.Node, a.proto(), a.Expect)
	if a.MinAge > 0 {
		s += ", made " + a.MinAge.String() + " ago or earlier"
	}
	return s
}

// Run implements Action.
func (a *NATMapping) Run(_ context.Context, env Env) (string, []report.Metric, error) {
	router, now, all, err := env.NATMappings(a.Node)
	if err != nil {
		return "", nil, err
	}
	var found []string
	var oldest time.Duration
	for _, m := range all {
		if m.Proto.String() != a.proto() {
			continue
		}
		age := now.Sub(m.Created)
		oldest = max(oldest, age)
		found = append(found, fmt.Sprintf("%v → %v (made %s ago, idle %s, expires in %s)", m.Inside, m.External,
			age.Round(time.Second), now.Sub(m.LastActive).Round(time.Second), m.Expires.Sub(now).Round(time.Second)))
	}
	detail := fmt.Sprintf("%s: no %s mapping of %s", router, a.proto(), a.Node)
	if len(found) > 0 {
		detail = fmt.Sprintf("%s: %s", router, strings.Join(found, "; "))
	}
	switch {
	case a.Expect == "absent" && len(found) > 0:
		return detail, nil, fmt.Errorf("%s still has %d %s mapping(s) of %s: %s", router, len(found), a.proto(), a.Node, strings.Join(found, "; "))
	case a.Expect == "present" && len(found) == 0:
		return detail, nil, fmt.Errorf("%s has no %s mapping of %s", router, a.proto(), a.Node)
	case a.Expect == "present" && oldest < a.MinAge:
		return detail, nil, fmt.Errorf("%s's oldest %s mapping of %s was made %s ago, want %s or more: %s", router, a.proto(), a.Node,
			oldest.Round(time.Second), a.MinAge, strings.Join(found, "; "))
	}
	return detail, nil, nil
}
