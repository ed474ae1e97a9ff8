package scenario

import (
	"fmt"
	"slices"
	"strings"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/topology"
)

// Action returns the step's action name ("wait_path") and value.
func (s *Step) Action() (string, any) {
	switch {
	case s.WaitPath != nil:
		return "wait_path", s.WaitPath
	case s.AssertPath != nil:
		return "assert_path", s.AssertPath
	case s.Ping != nil:
		return "ping", s.Ping
	case s.Fetch != nil:
		return "fetch", s.Fetch
	case s.Transfer != nil:
		return "transfer", s.Transfer
	case s.TimeToDirect != nil:
		return "time_to_direct", s.TimeToDirect
	case s.FullMesh != nil:
		return "full_mesh", s.FullMesh
	case s.Start != nil:
		return "start", s.Start
	case s.Stop != nil:
		return "stop", s.Stop
	case s.Restart != nil:
		return "restart", s.Restart
	case s.Move != nil:
		return "move", s.Move
	case s.LinkDown != nil:
		return "link_down", s.LinkDown
	case s.LinkUp != nil:
		return "link_up", s.LinkUp
	case s.Impair != nil:
		return "impair", s.Impair
	case s.BlockUDP != nil:
		return "block_udp", s.BlockUDP
	case s.UnblockUDP != nil:
		return "unblock_udp", s.UnblockUDP
	case s.NATReboot != nil:
		return "nat_reboot", s.NATReboot
	case s.AdvanceClk != nil:
		return "advance_clock", s.AdvanceClk
	case s.Blackhole != nil:
		return "blackhole_direct", s.Blackhole
	case s.Heal != nil:
		return "heal_direct", s.Heal
	case s.Sleep != nil:
		return "sleep", s.Sleep
	case s.Join != "":
		return "join", s.Join
	case s.Discover != nil:
		return "discover_nat", s.Discover
	case s.SOCKS5Fetch != nil:
		return "socks5_fetch", s.SOCKS5Fetch
	case s.Egress != nil:
		return "egress", s.Egress
	case s.Forward != nil:
		return "forward", s.Forward
	case s.AgentRun != nil:
		return "agent_run", s.AgentRun
	}
	return "", nil
}

// step checks one step and updates the timeline's state.
func (k *checker) step(path string, s *Step) {
	action, _ := s.Action()
	if action == "" {
		return // reported by the decoder
	}
	ap := path + "." + action
	if s.Background != "" {
		switch {
		case k.bgSeen[s.Background]:
			k.errorf(path+".background", "give each background step its own id", "background id %q is used twice", s.Background)
		case action == "join":
			k.errorf(path+".background", "", "a join cannot run in the background")
		}
		k.bgSeen[s.Background], k.bg[s.Background] = true, true
	}
	switch action {
	case "wait_path":
		k.pair(ap, s.WaitPath.From, s.WaitPath.To)
	case "assert_path":
		k.pair(ap, s.AssertPath.From, s.AssertPath.To)
	case "ping":
		k.pair(ap, s.Ping.From, s.Ping.To)
	case "transfer":
		k.pair(ap, s.Transfer.From, s.Transfer.To)
		if s.Transfer.Bytes <= 0 {
			k.errorf(ap+".bytes", "", "nothing to send")
		}
	case "time_to_direct":
		k.pair(ap, s.TimeToDirect.From, s.TimeToDirect.To)
	case "fetch":
		k.node(ap+".from", s.Fetch.From)
		k.urlHost(ap+".url", s.Fetch.URL)
	case "full_mesh":
		n := 0
		for _, up := range k.running {
			if up {
				n++
			}
		}
		if n < 2 {
			k.errorf(ap, "", "a mesh needs two running nodes, %d are running", n)
		}
	case "start", "stop", "restart":
		t := map[string]*Target{"start": s.Start, "stop": s.Stop, "restart": s.Restart}[action]
		k.target(ap, t, action)
	case "move":
		k.move(ap, s.Move)
	case "link_down", "link_up":
		ref := s.LinkDown
		if ref == nil {
			ref = s.LinkUp
		}
		if _, _, err := ResolveLink(k.plan, ref.Link); err != nil {
			k.errorf(ap+".link", k.linkHint(), "%v", err)
		}
	case "impair":
		if _, _, err := ResolveLink(k.plan, s.Impair.Link); err != nil {
			k.errorf(ap+".link", k.linkHint(), "%v", err)
		}
		for _, im := range []topology.Impairments{s.Impair.Set.Impairments, deref(s.Impair.Set.Egress), deref(s.Impair.Set.Ingress)} {
			if err := im.Link().Validate(); err != nil {
				k.errorf(ap, "", "%v", err)
			}
		}
	case "block_udp", "unblock_udp", "nat_reboot":
		ref := map[string]*RouterRef{"block_udp": s.BlockUDP, "unblock_udp": s.UnblockUDP, "nat_reboot": s.NATReboot}[action]
		router, err := ResolveRouter(k.plan, *ref)
		if err != nil {
			k.errorf(ap, k.routerHint(), "%v", err)
			break
		}
		switch {
		case action == "block_udp" && k.blocked[router]:
			k.errorf(ap, "", "%s's UDP is already blocked", router)
		case action == "unblock_udp" && !k.blocked[router]:
			k.errorf(ap, "block it first with block_udp", "%s's UDP is not blocked", router)
		}
		if action != "nat_reboot" {
			k.blocked[router] = action == "block_udp"
		}
	case "blackhole_direct", "heal_direct":
		p := s.Blackhole
		if p == nil {
			p = s.Heal
		}
		k.holePair(ap, action, p)
	case "join":
		if !k.bg[s.Join] {
			hint := "name the background id of an earlier step"
			if k.bgSeen[s.Join] {
				hint = "it was joined already"
			}
			k.errorf(ap, hint, "no background step %q to join", s.Join)
		}
		delete(k.bg, s.Join)
	case "discover_nat":
		k.discover(ap, s.Discover)
	case "socks5_fetch":
		if n := k.sandbox(ap+".node", s.SOCKS5Fetch.Node, "pod"); n != nil && n.Sandbox.SOCKS5 == "off" {
			k.errorf(ap+".node", "give the sandbox a socks5 address", "sandbox %s has no SOCKS5 proxy", n.Name)
		}
		k.urlHost(ap+".url", s.SOCKS5Fetch.URL)
	case "egress":
		k.sandbox(ap+".node", s.Egress.Node, "pod")
	case "forward":
		k.node(ap+".from", s.Forward.From)
		if n := k.sandbox(ap+".node", s.Forward.Node, "pod"); n != nil && !slices.ContainsFunc(n.Sandbox.Forwards, func(f string) bool {
			port, _, _ := strings.Cut(f, "=")
			return port == fmt.Sprint(s.Forward.Port)
		}) {
			k.errorf(ap+".port", "add it to the sandbox's forwards", "sandbox %s forwards no port %d", n.Name, s.Forward.Port)
		}
	case "agent_run":
		k.sandbox(ap+".node", s.AgentRun.Node, "gvisor")
		if len(s.AgentRun.Argv) == 0 || s.AgentRun.Argv[0] == "" {
			k.errorf(ap+".argv", "e.g. argv: [curl, -sf, http://web/]", "no agent command")
		}
	}
}

func deref(im *topology.Impairments) topology.Impairments {
	if im == nil {
		return topology.Impairments{}
	}
	return *im
}

func (k *checker) move(path string, m *Move) {
	if !k.node(path+".node", m.Node) {
		return
	}
	n := k.plan.Node(m.Node)
	nets := []string{n.Network}
	for _, r := range n.Roams {
		nets = append(nets, r.Network)
	}
	switch {
	case !slices.Contains(nets, m.To):
		k.errorf(path+".to", fmt.Sprintf("add it to the node's roams (it may move to: %s)", strings.Join(nets, ", ")),
			"node %s cannot move to %q", m.Node, m.To)
	case k.location[m.Node] == m.To:
		k.errorf(path+".to", "", "node %s is on %s already", m.Node, m.To)
	default:
		k.location[m.Node] = m.To
	}
}

func (k *checker) holePair(path, action string, p *Pair) {
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
	case action == "blackhole_direct" && k.holes[key]:
		k.errorf(path, "", "the direct path between %s and %s is already blackholed", a, b)
	case action == "heal_direct" && !k.holes[key]:
		k.errorf(path, "blackhole it first", "the direct path between %s and %s is not blackholed", a, b)
	}
	k.holes[key] = action == "blackhole_direct"
}

func (k *checker) discover(path string, d *Discover) {
	k.node(path+".node", d.Node)
	var names []string
	for _, s := range k.plan.STUN {
		if s.Alternate.IsValid() {
			names = append(names, s.Name)
		}
	}
	switch {
	case len(names) == 0:
		k.errorf(path, "give a STUN server an alternate address", "NAT discovery needs a STUN server with an alternate address")
	case d.STUN != "" && !slices.Contains(names, d.STUN):
		k.errorf(path+".stun", unknownHint(d.STUN, names, "STUN servers with an alternate address"), "no STUN server %q with an alternate address", d.STUN)
	}
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
