package topology

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
)

// allocate gives every attachment its network and address: explicit
// addresses first, so an automatic one never takes an address asked for
// later in the file, then the next free address of each network.
func (r *resolver) allocate() {
	netNames := make([]string, 0, len(r.t.Networks))
	for _, n := range r.t.Networks {
		netNames = append(netNames, n.Name)
	}
	var valid []*attach
	for _, a := range r.attaches {
		info := r.nets[a.net]
		netPath := a.path + ".network"
		switch {
		case a.net == "":
			continue // reported where it was declared
		case info == nil:
			r.errorf(netPath, unknownHint(a.net, netNames, "networks"), "no network %q", a.net)
			continue
		case !info.prefix.IsValid():
			continue // the network's own problem is reported
		}
		info.members = append(info.members, a)
		valid = append(valid, a)
	}
	for _, a := range valid {
		for i, addr := range append([]netip.Addr{a.addr}, a.aliases...) {
			if addr.IsValid() {
				path := a.path + ".addr"
				if a.ifName == "lan" || a.ifName == "wan" {
					path = a.path
				}
				if i > 0 {
					path = fmt.Sprintf("%s.aliases[%d]", a.path, i)
				}
				r.reserve(r.nets[a.net], addr, a.holder, path)
			}
		}
	}
	for _, a := range valid {
		if a.addr.IsValid() {
			continue
		}
		info := r.nets[a.net]
		addr := r.next(info)
		if !addr.IsValid() {
			r.errorf(a.path, fmt.Sprintf("widen %s's cidr %v", info.decl.Name, info.prefix),
				"network %s has no free address left for %s", info.decl.Name, a.holder)
			continue
		}
		a.addr = addr
		info.used[addr] = a.holder
	}
}

// reserve claims addr on a network for holder.
func (r *resolver) reserve(info *netInfo, addr netip.Addr, holder, path string) {
	p := info.prefix
	last := lastAddr(p)
	switch {
	case !p.Contains(addr):
		r.errorf(path, fmt.Sprintf("%s is %v", info.decl.Name, p), "%v is not on network %s", addr, info.decl.Name)
	case addr == p.Addr() || addr == last:
		r.errorf(path, fmt.Sprintf("use %v to %v", p.Addr().Next(), last.Prev()), "%v is %s's network or broadcast address", addr, info.decl.Name)
	case info.used[addr] != "":
		r.errorf(path, "leave addr out to get the next free one", "%v on %s is already %s's", addr, info.decl.Name, info.used[addr])
	default:
		info.used[addr] = holder
	}
}

// next returns the network's next free address, or the zero Addr.
func (r *resolver) next(info *netInfo) netip.Addr {
	if !info.cursor.IsValid() {
		info.cursor = info.prefix.Addr()
	}
	last := lastAddr(info.prefix)
	for a := info.cursor.Next(); a.IsValid() && a != last && info.prefix.Contains(a); a = a.Next() {
		if info.used[a] == "" {
			info.cursor = a
			return a
		}
	}
	return netip.Addr{}
}

func lastAddr(p netip.Prefix) netip.Addr {
	if p.Addr().Is6() {
		return lastAddr6(p)
	}
	b := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// build turns the resolved attachments into the plan's routers, hosts,
// services and nodes.
func (r *resolver) build() {
	for _, n := range r.t.Networks {
		info := r.nets[n.Name]
		if info == nil || !info.prefix.IsValid() {
			continue
		}
		r.p.Networks = append(r.p.Networks, PlanNetwork{
			Config: info.fabricNetwork(n.Name, n.MTU),
			Uplink: info.parent, Gateway: info.gwName,
		})
	}
	r.routes()
	r.routes6()
	byOwner := map[string][]*attach{}
	var owners []string
	for _, a := range r.attaches {
		if !a.addr.IsValid() {
			continue
		}
		if _, ok := byOwner[a.owner]; !ok {
			owners = append(owners, a.owner)
		}
		byOwner[a.owner] = append(byOwner[a.owner], a)
	}
	for _, owner := range owners {
		as := byOwner[owner]
		ifcs := make([]fabric.InterfaceConfig, len(as))
		var routes []fabric.Route
		for i, a := range as {
			aliases := append([]netip.Addr(nil), a.aliases...)
			for _, x := range append([]netip.Addr{a.addr}, a.aliases...) {
				if a6 := r.nets[a.net].v6(x); a6.IsValid() && a6 != x {
					aliases = append(aliases, a6) // a dual-stack network's twins
				}
			}
			if len(aliases) == 0 {
				aliases = nil
			}
			ifcs[i] = fabric.InterfaceConfig{Name: a.ifName, Network: a.net, Addr: a.addr, Aliases: aliases, MTU: a.mtu,
				Egress: a.link.impairments(fabric.Egress), Ingress: a.link.impairments(fabric.Ingress)}
			for _, dir := range []fabric.Direction{fabric.Egress, fabric.Ingress} {
				im := ifcs[i].Egress
				if dir == fabric.Ingress {
					im = ifcs[i].Ingress
				}
				if err := im.Validate(); err != nil {
					r.errorf(a.path+".link", "", "%v", err)
				}
			}
			routes = append(routes, a.routes...)
		}
		if as[0].router {
			r.buildRouter(owner, ifcs, routes)
		} else {
			r.buildHost(owner, ifcs, routes)
		}
	}
	r.finishServices()
	r.finishNodes()
}

// buildRouter adds a gateway or explicit router to the plan.
func (r *resolver) buildRouter(name string, ifcs []fabric.InterfaceConfig, routes []fabric.Route) {
	for _, n := range r.t.Networks {
		info := r.nets[n.Name]
		if info == nil || info.gwName != name {
			continue
		}
		cfg := fabric.RouterConfig{Name: name, Interfaces: ifcs, Uplink: "wan", Routes: routes}
		if up := r.nets[info.parent]; up != nil && up.parent != "" {
			cfg.Gateway, cfg.Gateway6 = up.gateways()
		}
		path := "networks." + n.Name
		profile := ""
		has6 := info.prefix6.IsValid() || info.prefix.Addr().Is6()
		switch {
		case n.NAT != nil && n.NAT.Profile == firewall6Profile:
			cfg.Stateful, profile = r.statefulConfig(path+".nat", n.NAT), firewall6Profile
			if n.NAT.Filtering != "" || n.NAT.Refresh != "" || n.NAT.UDPTimeout != 0 || n.NAT.TCPTimeout != 0 || n.NAT.TCPTransitoryTimeout != 0 || n.NAT.ICMPTimeout != 0 {
				profile += "*"
			}
			if !has6 {
				r.errorf(path+".nat", "add cidr6, or pick a NAT profile", "ipv6-firewall filters IPv6, and %s has no cidr6", n.Name)
			}
			if n.Firewall != nil {
				fw := r.firewall(path+".firewall", n.Firewall)
				cfg.Firewall = &fw
			}
		case n.NAT != nil && n.NAT.Profile == nat64Profile:
			cfg.NAT64, cfg.Stateful, profile = r.nat64Config(path, &n, info)
		case n.NAT != nil && n.NAT.Prefix64.IsValid():
			r.errorf(path+".nat.prefix64", "use nat: nat64", "prefix64 is the NAT64 prefix, and %s's nat is %s", n.Name, n.NAT.Profile)
		case n.NAT != nil && !info.prefix.Addr().Is4():
			r.errorf(path+".nat", "use nat: ipv6-firewall", "NAT profiles translate IPv4, and %s is IPv6-only", n.Name)
		case n.NAT != nil:
			if up := r.nets[info.parent]; up != nil && up.prefix.IsValid() && !up.prefix.Addr().Is4() {
				r.errorf(path+".nat", fmt.Sprintf("give %s a cidr, or use nat: ipv6-firewall", info.parent),
					"NAT profiles translate IPv4, and the uplink %s is IPv6-only", info.parent)
			}
			cfg.NAT, profile = r.natConfig(path+".nat", n.NAT, n.Firewall, path+".firewall")
			if has6 {
				cfg.Stateful = r.statefulConfig(path+".nat", n.NAT) // a NAT44 router filters the IPv6 it routes
			}
		case n.Firewall != nil:
			fw := r.firewall(path+".firewall", n.Firewall)
			cfg.Firewall = &fw
		}
		r.p.Routers = append(r.p.Routers, PlanRouter{Config: cfg, Profile: profile, For: n.Name})
		return
	}
	for _, rt := range r.t.Routers {
		if rt.Name != name {
			continue
		}
		path := "routers." + name
		cfg := fabric.RouterConfig{Name: name, Interfaces: ifcs, Gateway: rt.Gateway, Routes: routes}
		for _, rr := range rt.Routes {
			cfg.Routes = append(cfg.Routes, fabric.Route{Dst: rr.To, Via: rr.Via})
		}
		if rt.Uplink != "" {
			i := slices.IndexFunc(ifcs, func(c fabric.InterfaceConfig) bool { return c.Network == rt.Uplink })
			if i < 0 {
				r.errorf(path+".uplink", "", "router %s has no interface on %q", name, rt.Uplink)
			} else {
				cfg.Uplink = ifcs[i].Name
			}
		}
		if (rt.NAT != nil || rt.Firewall != nil) && rt.Uplink == "" && !rt.Gateway.IsValid() {
			r.errorf(path, "add uplink: NETWORK", "nat and firewall need an uplink or a gateway to know the outside")
		}
		profile := ""
		if rt.NAT != nil && rt.NAT.Profile == nat64Profile {
			r.errorf(path+".nat", "put nat: nat64 on the IPv6-only network (networks.NAME.nat)", "nat64 is a network gateway's profile")
		} else if rt.NAT != nil {
			cfg.NAT, profile = r.natConfig(path+".nat", rt.NAT, rt.Firewall, path+".firewall")
		} else if rt.Firewall != nil {
			fw := r.firewall(path+".firewall", rt.Firewall)
			cfg.Firewall = &fw
		}
		r.p.Routers = append(r.p.Routers, PlanRouter{Config: cfg, Profile: profile})
		return
	}
}

// buildHost adds an explicit or implicit host to the plan.
func (r *resolver) buildHost(name string, ifcs []fabric.InterfaceConfig, routes []fabric.Route) {
	cfg := fabric.HostConfig{Name: name, Interfaces: ifcs, Routes: routes}
	kind, forWhat := "inprocess", ""
	i := slices.IndexFunc(r.t.Hosts, func(h Host) bool { return h.Name == name })
	if i >= 0 {
		h := r.t.Hosts[i]
		if h.Kind != "" {
			kind = h.Kind
		}
		cfg.Gateway = h.Gateway
		for _, rr := range h.Routes {
			cfg.Routes = append(cfg.Routes, fabric.Route{Dst: rr.To, Via: rr.Via})
		}
		path := "hosts." + name
		if h.Gateway.IsValid() && !slices.ContainsFunc(ifcs, func(c fabric.InterfaceConfig) bool { return r.nets[c.Network].prefix.Contains(h.Gateway) }) {
			r.errorf(path+".gateway", "", "gateway %v is on none of the host's networks", h.Gateway)
		}
		for j, rr := range h.Routes {
			if !slices.ContainsFunc(ifcs, func(c fabric.InterfaceConfig) bool { return r.nets[c.Network].prefix.Contains(rr.Via) }) {
				r.errorf(fmt.Sprintf("%s.routes[%d].via", path, j+1), "", "next hop %v is on none of the host's networks", rr.Via)
			}
		}
	} else {
		forWhat = name
		if r.kernel[name] {
			kind = "netns"
		}
	}
	if cfg.Gateway.IsValid() && cfg.Gateway.Is6() {
		cfg.Gateway, cfg.Gateway6 = netip.Addr{}, cfg.Gateway
	}
	if !cfg.Gateway.IsValid() && !cfg.Gateway6.IsValid() {
		if info := r.nets[ifcs[0].Network]; info != nil && info.parent != "" {
			cfg.Gateway, cfg.Gateway6 = info.gateways()
		}
	}
	r.p.Hosts = append(r.p.Hosts, PlanHost{Config: cfg, Kind: kind, For: forWhat})
}

// natConfig builds a NAT's configuration from a profile and knobs.
func (r *resolver) natConfig(path string, n *NAT, fw *Firewall, fwPath string) (*nat.Config, string) {
	var cfg nat.Config
	label := "custom"
	if n.Profile != "" {
		var err error
		if cfg, err = nat.Profile(n.Profile); err != nil {
			r.errorf(path+".profile", "", "%v", err)
		}
		label = n.Profile
	}
	knobs := false
	for _, k := range []struct {
		set   string
		apply func(string) error
	}{
		{n.Mapping, func(s string) (err error) { cfg.Mapping, err = nat.ParseMapping(s); return }},
		{n.Filtering, func(s string) (err error) { cfg.Filtering, err = nat.ParseFiltering(s); return }},
		{n.Ports, func(s string) (err error) { cfg.PortAllocation, err = nat.ParsePortAllocation(s); return }},
		{n.Refresh, func(s string) (err error) { cfg.Refresh, err = nat.ParseRefresh(s); return }},
	} {
		if k.set != "" {
			knobs = true
			if err := k.apply(k.set); err != nil {
				r.errorf(path, "", "%v", err)
			}
		}
	}
	if n.PortRange != "" {
		knobs = true
		var pr PortRange
		if err := pr.UnmarshalText([]byte(n.PortRange)); err != nil {
			r.errorf(path+".port_range", "", "%v", err)
		}
		cfg.PortMin, cfg.PortMax = pr.First, pr.Last
	}
	if n.Hairpin != nil {
		knobs = true
		cfg.Hairpin = *n.Hairpin
	}
	for dst, src := range map[*time.Duration]time.Duration{
		&cfg.UDPTimeout: n.UDPTimeout, &cfg.TCPEstablishedTimeout: n.TCPTimeout,
		&cfg.TCPTransitoryTimeout: n.TCPTransitoryTimeout, &cfg.ICMPTimeout: n.ICMPTimeout,
	} {
		if src != 0 {
			knobs = true
			*dst = src
		}
	}
	if n.MaxMappings != 0 {
		knobs = true
		cfg.MaxMappings = n.MaxMappings
	}
	if fw != nil {
		knobs = true
		cfg.Firewall = r.firewall(fwPath, fw)
	}
	if knobs && label != "custom" {
		label += "*"
	}
	cfg.Public = netip.AddrFrom4([4]byte{192, 0, 2, 1}) // checked here, set by the router
	if err := cfg.Validate(); err != nil {
		r.errorf(path, "", "%v", err)
	}
	cfg.Public = netip.Addr{}
	return &cfg, label
}

// firewall converts a firewall.
func (r *resolver) firewall(path string, fw *Firewall) nat.Firewall {
	before := r.c.Len()
	out := nat.Firewall{DefaultDeny: fw.Default == "deny"}
	for i, rule := range fw.Rules {
		nr := nat.Rule{Dst: rule.To}
		nr.Action, _ = nat.ParseAction(rule.Action)
		if rule.Proto != "" {
			nr.Proto, _ = nat.ParseProto(rule.Proto)
		}
		for _, pr := range rule.Ports {
			nr.Ports = append(nr.Ports, nat.PortRange(pr))
		}
		if len(rule.Ports) > 0 && rule.Proto == "icmp" {
			r.errorf(fmt.Sprintf("%s.rules[%d].ports", path, i+1), "use proto tcp, udp or any", "icmp has no ports")
		}
		out.Rules = append(out.Rules, nr)
	}
	if err := out.Validate(); err != nil && r.c.Len() == before {
		r.errorf(path, "", "%v", err)
	}
	return out
}
