package topology

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
)

// IPv6 in topologies. A network's cidr6 makes it dual-stack (with cidr) or
// IPv6-only (alone). On a dual-stack network every interface's IPv6
// address is its IPv4 address's offset in cidr6 (192.168.1.2 becomes
// 2001:db8:1::2), so a file names addresses once; on an IPv6-only network
// cidr6 is the network's one prefix and addresses are allocated from it as
// IPv4 ones are. IPv6 is never translated: gateways route it, and above a
// NAT they filter it as an RFC 6092 home router does (nat: ipv6-firewall
// routes IPv4 too, untranslated).

// firewall6Profile is the nat: profile that translates nothing.
const firewall6Profile = "ipv6-firewall"

// network6 checks a network's cidr6 and records it.
func (r *resolver) network6(n *Network, info *netInfo, path string) {
	p := n.CIDR6
	switch {
	case !p.IsValid():
		_, cidrGiven := r.src.Pos[r.src.full(path+".cidr")]
		_, cidr6Given := r.src.Pos[r.src.full(path+".cidr6")]
		if !n.CIDR.IsValid() && !cidrGiven && !cidr6Given { // a bad one is reported where it is
			r.errorf(path, "add cidr: 192.168.1.0/24, cidr6: 2001:db8:1::/64, or both", "network %s has no prefix", n.Name)
		}
		return
	case !p.Addr().Is6() || p.Addr().Is4In6():
		r.errorf(path+".cidr6", "put IPv4 prefixes in cidr", "cidr6 %v is not an IPv6 prefix", p)
		return
	case p != p.Masked():
		r.errorf(path+".cidr6", fmt.Sprintf("did you mean %v?", p.Masked()), "cidr6 %v has host bits set", p)
		return
	case p.Bits() > 120:
		r.errorf(path+".cidr6", "use /120 or shorter (/64 is usual)", "cidr6 %v leaves no room for hosts", p)
		return
	}
	if !n.CIDR.IsValid() {
		info.prefix = p // IPv6-only: allocated like IPv4
		return
	}
	if info.prefix.IsValid() && 128-p.Bits() < 32-info.prefix.Bits() {
		r.errorf(path+".cidr6", fmt.Sprintf("use /%d or shorter", 96+info.prefix.Bits()),
			"cidr6 %v is smaller than cidr %v: every IPv4 address needs its IPv6 twin", p, info.prefix)
		return
	}
	info.prefix6 = p
}

// v6 returns the IPv6 address an interface at a has on the network: a
// itself on an IPv6-only network, its twin on a dual-stack one, else zero.
func (info *netInfo) v6(a netip.Addr) netip.Addr {
	switch {
	case info == nil || !a.IsValid():
		return netip.Addr{}
	case a.Is6():
		return a
	case !info.prefix6.IsValid() || !info.prefix.Contains(a):
		return netip.Addr{}
	}
	b4, base := a.As4(), info.prefix.Masked().Addr().As4()
	off := (uint32(b4[0])<<24 | uint32(b4[1])<<16 | uint32(b4[2])<<8 | uint32(b4[3])) -
		(uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3]))
	b6 := info.prefix6.Masked().Addr().As16()
	for i := 15; i >= 12 && off > 0; i-- {
		b6[i] |= byte(off)
		off >>= 8
	}
	return netip.AddrFrom16(b6)
}

// v4 returns a if it is IPv4, else zero.
func v4(a netip.Addr) netip.Addr {
	if a.Is4() {
		return a
	}
	return netip.Addr{}
}

// fabricNetwork is a network's fabric configuration.
func (info *netInfo) fabricNetwork(name string, mtu int) fabric.NetworkConfig {
	cfg := fabric.NetworkConfig{Name: name, MTU: mtu, Prefix6: info.prefix6}
	if info.prefix.Addr().Is6() {
		cfg.Prefix6 = info.prefix
	} else {
		cfg.Prefix = info.prefix
	}
	return cfg
}

// gateways returns a host's or router's default routes' next hops on a
// network: its gateway router's address of each family.
func (info *netInfo) gateways() (gw, gw6 netip.Addr) {
	return v4(info.gw), info.v6(info.gw)
}

// lastAddr6 is lastAddr for an IPv6 prefix.
func lastAddr6(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As16()
	for i := p.Bits(); i < 128; i++ {
		b[i/8] |= 1 << (7 - uint(i%8))
	}
	return netip.AddrFrom16(b)
}

// routes6 gives every network above a gateway a route to the IPv6 prefix
// below it: nothing translates IPv6, so the route goes all the way up, as
// far as the networks on the way speak IPv6.
func (r *resolver) routes6() {
	wan6 := func(router string) netip.Addr {
		for _, a := range r.attaches {
			if a.owner == router && a.ifName == "wan" {
				return r.nets[a.net].v6(a.addr)
			}
		}
		return netip.Addr{}
	}
	for _, n := range r.t.Networks {
		info := r.nets[n.Name]
		if info == nil || info.parent == "" {
			continue
		}
		dst := info.prefix6
		if info.prefix.Addr().Is6() {
			dst = info.prefix
		}
		if !dst.IsValid() {
			continue
		}
		route := fabric.Route{Dst: dst, Via: wan6(info.gwName)}
		for cur := info; cur != nil && cur.parent != "" && route.Via.IsValid(); {
			up := r.nets[cur.parent]
			for _, a := range up.members {
				if a.owner != cur.gwName {
					a.routes = append(a.routes, route)
				}
			}
			route.Via = wan6(up.gwName)
			cur = up
		}
	}
}

// overlaps6 reports IPv6 prefixes that overlap anywhere: no NAT separates
// them.
func (r *resolver) overlaps6() {
	var seen []PlanNetwork
	for _, n := range r.p.Networks {
		p := n.Config.Prefix6
		if !p.IsValid() {
			continue
		}
		for _, o := range seen {
			if o.Config.Prefix6.Overlaps(p) {
				r.errorf("networks."+n.Config.Name+".cidr6", "give every network its own IPv6 prefix",
					"%v overlaps %s's %v: IPv6 is never translated", p, o.Config.Name, o.Config.Prefix6)
			}
		}
		seen = append(seen, n)
	}
}

// statefulConfig builds a gateway's IPv6 filter: nat: ipv6-firewall with
// its knobs, or the profile's defaults under any other NAT.
func (r *resolver) statefulConfig(path string, n *NAT) *nat.StatefulConfig {
	cfg, _ := nat.FirewallProfile(firewall6Profile)
	if n.Profile != firewall6Profile {
		return &cfg
	}
	for key, set := range map[string]bool{
		"mapping": n.Mapping != "", "ports": n.Ports != "", "port_range": n.PortRange != "",
		"hairpin": n.Hairpin != nil, "max_mappings": n.MaxMappings != 0,
	} {
		if set {
			r.errorf(path+"."+key, "ipv6-firewall takes filtering, refresh and the timeouts", "ipv6-firewall translates nothing: %s does not apply", key)
		}
	}
	var err error
	if n.Filtering != "" {
		if cfg.Filtering, err = nat.ParseFiltering(n.Filtering); err != nil {
			r.errorf(path+".filtering", "", "%v", err)
		}
	}
	if n.Refresh != "" {
		if cfg.Refresh, err = nat.ParseRefresh(n.Refresh); err != nil {
			r.errorf(path+".refresh", "", "%v", err)
		}
	}
	for dst, src := range map[*time.Duration]time.Duration{
		&cfg.UDPTimeout: n.UDPTimeout, &cfg.TCPEstablishedTimeout: n.TCPTimeout,
		&cfg.TCPTransitoryTimeout: n.TCPTransitoryTimeout, &cfg.ICMPTimeout: n.ICMPTimeout,
	} {
		*dst = src
	}
	if err := cfg.Validate(); err != nil {
		r.errorf(path, "", "%v", err)
	}
	return &cfg
}

// kernelIPv4 reports kernel (netns) hosts given an IPv6 address: a
// kernel host's TUN carries IPv4 only, so the fabric would refuse them.
func (r *resolver) kernelIPv4() {
	for _, h := range r.p.Hosts {
		if h.Kind != "netns" {
			continue
		}
		for _, ifc := range h.Config.Interfaces {
			i := slices.IndexFunc(append([]netip.Addr{ifc.Addr}, ifc.Aliases...), netip.Addr.Is6)
			if i < 0 {
				continue
			}
			path := "hosts." + h.Config.Name
			if n := r.p.Node(h.For); n != nil {
				path = "nodes." + n.Group
			}
			r.errorf(path, "put it on a network without cidr6, or use an in-process host",
				"host %s is a kernel (netns) host, and those speak IPv4 only; network %s has IPv6", h.Config.Name, ifc.Network)
		}
	}
}
