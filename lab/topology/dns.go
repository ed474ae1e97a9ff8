package topology

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/latticelab/lattice/lab/nat"
)

// DNS in topologies: a dns: server answers for every host, node and
// service as NAME.lab, and with dns64 synthesizes AAAA records for names
// that have only IPv4 (RFC 6147), the resolver an IPv6-only network
// behind nat: nat64 needs.

// Zone is the domain the lab's DNS servers answer names under.
const Zone = "lab"

// dns64 checks a DNS server's dns64 prefix: an IPv6 /96 (RFC 6052's
// format, the one the lab's NAT64 embeds IPv4 in).
func (r *resolver) dns64(s DNS) netip.Prefix {
	p, path := s.DNS64, "dns."+s.Name+".dns64"
	switch {
	case !p.IsValid():
		return netip.Prefix{}
	case !p.Addr().Is6() || p.Addr().Is4In6():
		r.errorf(path, "use the nat64 networks' prefix64, 64:ff9b::/96 unless they set one", "dns64 %v is not an IPv6 prefix", p)
	case p.Bits() != 96:
		r.errorf(path, "use the nat64 networks' prefix64, 64:ff9b::/96 unless they set one", "dns64 %v is not a /96 (RFC 6052's format, the one nat64 uses)", p)
	default:
		return p
	}
	return netip.Prefix{}
}

// twin returns the IPv6 twin of a host's IPv4 address addr on a
// dual-stack network, or zero.
func (r *resolver) twin(host string, addr netip.Addr) netip.Addr {
	for _, a := range r.attaches {
		if a.owner == host && (a.addr == addr || slices.Contains(a.aliases, addr)) {
			if a6 := r.nets[a.net].v6(addr); a6 != addr {
				return a6
			}
			return netip.Addr{}
		}
	}
	return netip.Addr{}
}

// dnsRecords fills every DNS server's table, and checks that a dns64
// prefix is one some nat64 network translates.
func (r *resolver) dnsRecords() {
	if len(r.p.DNS) == 0 {
		return
	}
	records := map[string][]netip.Addr{}
	add := func(name string, addrs ...netip.Addr) {
		key := name + "." + Zone
		for _, a := range addrs {
			if a.IsValid() && !slices.Contains(records[key], a) {
				records[key] = append(records[key], a)
			}
		}
	}
	hostAddrs := map[string][]netip.Addr{}
	for _, h := range r.p.Hosts {
		for _, ifc := range h.Config.Interfaces {
			hostAddrs[h.Config.Name] = append(append(hostAddrs[h.Config.Name], ifc.Addr), ifc.Aliases...)
		}
		add(h.Config.Name, hostAddrs[h.Config.Name]...)
	}
	services := r.p.services()
	for _, s := range r.p.DNS {
		services = append(services, s.PlanService)
	}
	for _, s := range services {
		if s.Name != s.Host {
			add(s.Name, s.Addr.Addr(), s.Addr6.Addr())
		}
	}
	for _, n := range r.p.Nodes {
		if n.Name != n.Host {
			add(n.Name, hostAddrs[n.Host]...)
		}
	}
	var prefixes []netip.Prefix
	for _, rt := range r.p.Routers {
		if c := rt.Config.NAT64; c != nil {
			p := c.Prefix
			if !p.IsValid() {
				p = nat.WellKnownPrefix64
			}
			prefixes = append(prefixes, p)
		}
	}
	for i := range r.p.DNS {
		d := &r.p.DNS[i]
		d.Records = records
		if d.DNS64.IsValid() && !slices.Contains(prefixes, d.DNS64) {
			var have []string
			for _, p := range prefixes {
				have = append(have, p.String())
			}
			hint := "add a network with nat: nat64, or drop dns64"
			if len(have) > 0 {
				hint = "the nat64 networks here use " + strings.Join(slices.Compact(have), ", ")
			}
			r.errorf("dns."+d.Name+".dns64", hint, "no nat64 network translates %v: its synthesized addresses would lead nowhere", d.DNS64)
		}
	}
}

// families reports nodes that share no address family with a service
// they need: a node with IPv6 only reaches IPv4-only services through a
// NAT64 and no other way; a node with IPv4 only never reaches IPv6-only
// services (nothing here translates IPv4 to IPv6).
func (r *resolver) families() {
	services := r.p.services()
	reported := map[[2]string]bool{}
	for _, n := range r.p.Nodes {
		has4 := n.Addr.Is4()
		has6 := n.Addr.Is6() || r.twin(n.Host, n.Addr).IsValid()
		nat64 := slices.ContainsFunc(n.NATs, func(name string) bool {
			rt := r.p.Router(name)
			return rt != nil && rt.Config.NAT64 != nil
		})
		for _, s := range services {
			s4, s6 := s.Addr.Addr().Is4(), s.Addr.Addr().Is6() || s.Addr6.IsValid()
			key := [2]string{n.Group, s.Name}
			gap := r.without6(n.Network, r.hostNet(s.Host))
			if (has4 && s4) || (has6 && s6 && gap == "") || (nat64 && s4) || reported[key] {
				continue
			}
			reported[key] = true
			switch {
			case has6 && s6:
				r.errorf("nodes."+n.Group, "give "+gap+" a cidr6",
					"node %s reaches %s over IPv6 only, and %s on the way has no IPv6", n.Name, s.Name, gap)
			case has6:
				r.errorf("nodes."+n.Group, "give the service's network a cidr6, or put the node's network behind nat: nat64",
					"node %s has only IPv6 and %s only IPv4 (%v)", n.Name, s.Name, s.Addr.Addr())
			default:
				r.errorf("nodes."+n.Group, "give the service's network a cidr, or the node's a cidr6",
					"node %s has only IPv4 and %s only IPv6 (%v)", n.Name, s.Name, s.Addr.Addr())
			}
		}
	}
}

// without6 returns a network on the way between two networks (up to
// their common uplink and down) that has no IPv6, or "".
func (r *resolver) without6(from, to string) string {
	var up []string
	for cur := from; cur != "" && r.nets[cur] != nil; cur = r.nets[cur].parent {
		up = append(up, cur)
	}
	var down []string
	for cur := to; cur != "" && r.nets[cur] != nil; cur = r.nets[cur].parent {
		if i := slices.Index(up, cur); i >= 0 {
			for _, name := range append(up[:i+1], down...) {
				if info := r.nets[name]; !info.prefix6.IsValid() && !info.prefix.Addr().Is6() {
					return name
				}
			}
			return ""
		}
		down = append(down, cur)
	}
	return "" // no common uplink: reachability reports it
}
