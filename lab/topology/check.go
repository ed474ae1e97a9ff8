package topology

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/latticelab/lattice/lab/fabric"
)

// routes gives the networks above a gateway without NAT a route to the
// network below it, up to the first NAT (beyond which nobody needs one).
func (r *resolver) routes() {
	wanOf := func(router string) netip.Addr {
		for _, a := range r.attaches {
			if a.owner == router && a.ifName == "wan" {
				return a.addr
			}
		}
		return netip.Addr{}
	}
	for _, n := range r.t.Networks {
		info := r.nets[n.Name]
		if info == nil || info.parent == "" || info.nat || !info.prefix.Addr().Is4() {
			continue // IPv6-only networks are routes6's
		}
		route := fabric.Route{Dst: info.prefix, Via: v4(wanOf(info.gwName))}
		for cur := info; cur != nil && cur.parent != "" && !cur.nat && route.Via.IsValid(); {
			up := r.nets[cur.parent]
			for _, a := range up.members {
				if a.owner != cur.gwName {
					a.routes = append(a.routes, route)
				}
			}
			route.Via = v4(wanOf(up.gwName))
			cur = up
		}
	}
}

// binding is a listening socket, to find two services on one port.
type binding struct {
	host, proto string
	addr        netip.Addr // invalid: every address
	port        uint16
	holder      string
	path        string
}

func (r *resolver) bind(b binding) {
	for _, o := range r.bindings {
		if o.host == b.host && o.proto == b.proto && o.port == b.port && (o.addr == b.addr || !o.addr.IsValid() || !b.addr.IsValid()) {
			r.errorf(b.path, "give one of them another port", "%s port %d on host %s is already %s's", b.proto, b.port, b.host, o.holder)
			return
		}
	}
	r.bindings = append(r.bindings, b)
}

// hostAddrs lists a host's addresses, interface by interface.
func (r *resolver) hostAddrs(host string) []netip.Addr {
	var out []netip.Addr
	for _, a := range r.attaches {
		if a.owner == host && a.addr.IsValid() {
			out = append(out, a.addr)
			out = append(out, a.aliases...)
		}
	}
	return out
}

// hostNet is the network of a host's first interface.
func (r *resolver) hostNet(host string) string {
	for _, a := range r.attaches {
		if a.owner == host && a.addr.IsValid() {
			return a.net
		}
	}
	return ""
}

func (r *resolver) finishServices() {
	for _, ps := range r.pendingServices {
		addrs := r.hostAddrs(ps.host)
		if len(addrs) == 0 {
			continue // the host's problem is reported
		}
		addr := addrs[0]
		if ps.addr.IsValid() {
			if !slices.Contains(addrs, ps.addr) {
				r.errorf(ps.path+".addr", fmt.Sprintf("host %s has %v", ps.host, addrs), "%v is not an address of host %s", ps.addr, ps.host)
				continue
			}
			addr = ps.addr
		}
		ps.addr = addr
		svc := PlanService{Name: ps.name, Host: ps.host, Addr: netip.AddrPortFrom(addr, ps.port)}
		if a6 := r.twin(ps.host, addr); a6.IsValid() {
			svc.Addr6 = netip.AddrPortFrom(a6, ps.port)
		}
		holder := ps.kind + " " + ps.name
		if ps.kind == ps.name {
			holder = ps.kind
		}
		switch ps.kind {
		case "control":
			r.bind(binding{ps.host, "tcp", addr, ps.port, holder, ps.path + ".port"})
			if ps.httpPort != 0 {
				svc.HTTP = netip.AddrPortFrom(addr, ps.httpPort)
				r.bind(binding{ps.host, "tcp", addr, ps.httpPort, holder + " (http)", ps.path + ".http_port"})
			}
			r.p.Control = &svc
		case "relay":
			r.bind(binding{ps.host, "tcp", addr, ps.port, holder, ps.path + ".port"})
			r.bind(binding{ps.host, "udp", addr, ps.port, holder, ps.path + ".port"})
			r.p.Relays = append(r.p.Relays, svc)
		case "stun":
			st := PlanSTUN{PlanService: svc}
			bound := []netip.Addr{addr}
			ports := []uint16{ps.port}
			if ps.alternate.IsValid() {
				switch {
				case !slices.Contains(addrs, ps.alternate):
					r.errorf(ps.path+".alternate", fmt.Sprintf("add it to host %s's aliases", ps.host), "%v is not an address of host %s", ps.alternate, ps.host)
				case ps.alternate == addr:
					r.errorf(ps.path+".alternate", "", "the alternate address must differ from the primary %v", addr)
				default:
					st.Alternate = netip.AddrPortFrom(ps.alternate, ps.port+1)
					if a6 := r.twin(ps.host, ps.alternate); a6.IsValid() {
						st.Alternate6 = netip.AddrPortFrom(a6, ps.port+1)
					}
					bound = append(bound, ps.alternate)
					ports = append(ports, ps.port+1)
				}
			}
			for _, a := range bound {
				for _, p := range ports {
					r.bind(binding{ps.host, "udp", a, p, holder, ps.path + ".port"})
				}
			}
			r.p.STUN = append(r.p.STUN, st)
		case "dns":
			r.bind(binding{ps.host, "udp", addr, ps.port, holder, ps.path + ".port"})
			r.p.DNS = append(r.p.DNS, PlanDNS{PlanService: svc, DNS64: ps.dns64})
		}
	}
}

// natChain lists the NAT routers above a network, innermost first.
func (r *resolver) natChain(net string) []string {
	var out []string
	for cur := r.nets[net]; cur != nil && cur.parent != ""; cur = r.nets[cur.parent] {
		if cur.nat {
			out = append(out, cur.gwName)
		}
	}
	return out
}

func (r *resolver) finishNodes() {
	for _, pn := range r.pendingNodes {
		addrs := r.hostAddrs(pn.Host)
		if len(addrs) == 0 {
			continue
		}
		n := pn.PlanNode
		n.Addr = addrs[0]
		n.Network = r.hostNet(pn.Host)
		n.NATs = r.natChain(n.Network)
		for _, host := range pn.roams {
			if a := r.hostAddrs(host); len(a) > 0 {
				net := r.hostNet(host)
				n.Roams = append(n.Roams, Roam{Network: net, Host: host, Addr: a[0], NATs: r.natChain(net)})
			}
		}
		r.bind(binding{n.Host, "udp", netip.Addr{}, n.ListenPort, "node " + n.Name, pn.path + ".listen_port"})
		if sb := n.Sandbox; sb != nil {
			for key, a := range map[string]string{"socks5": sb.SOCKS5, "http_proxy": sb.HTTPProxy} {
				if ap, err := netip.ParseAddrPort(a); err == nil {
					r.bind(binding{n.Host, "tcp", ap.Addr(), ap.Port(), "sandbox " + n.Name + " " + key, pn.path + ".sandbox." + key})
				}
			}
		}
		r.p.Nodes = append(r.p.Nodes, n)
	}
}

// overlaps reports overlapping prefixes that no NAT separates: routing
// between them would be ambiguous.
func (r *resolver) overlaps() {
	parent := map[string]string{}
	var find func(string) string
	find = func(n string) string {
		p, ok := parent[n]
		if !ok || p == n {
			parent[n] = n
			return n
		}
		root := find(p)
		parent[n] = root
		return root
	}
	for _, rt := range r.p.Routers {
		var first string
		for _, ifc := range rt.Config.Interfaces {
			if rt.Config.NAT != nil && ifc.Name == rt.Config.Uplink {
				continue
			}
			if first == "" {
				first = ifc.Network
				continue
			}
			parent[find(first)] = find(ifc.Network)
		}
	}
	direct := map[[2]string]bool{}
	for _, h := range r.p.Hosts {
		r.ownOverlap(h.Config.Name, h.Config.Interfaces, direct)
	}
	for _, rt := range r.p.Routers {
		r.ownOverlap(rt.Config.Name, rt.Config.Interfaces, direct)
	}
	nets := r.p.Networks
	for i, a := range nets {
		for _, b := range nets[i+1:] {
			pair := [2]string{a.Config.Name, b.Config.Name}
			if a.Config.Prefix.Overlaps(b.Config.Prefix) && find(a.Config.Name) == find(b.Config.Name) && !direct[pair] {
				r.errorf("networks."+b.Config.Name+".cidr", "put a NAT between them (nat: on the gateway), or renumber one",
					"%v overlaps %s's %v, and they are routed to each other without a NAT", b.Config.Prefix, a.Config.Name, a.Config.Prefix)
			}
		}
	}
}

// ownOverlap reports one host or router attached to overlapping networks.
func (r *resolver) ownOverlap(owner string, ifcs []fabric.InterfaceConfig, reported map[[2]string]bool) {
	for i, a := range ifcs {
		for _, b := range ifcs[:i] {
			pa, pb := r.nets[a.Network].prefix, r.nets[b.Network].prefix
			if pa.Overlaps(pb) {
				reported[[2]string{a.Network, b.Network}] = true
				reported[[2]string{b.Network, a.Network}] = true
				path := "hosts." + owner
				if r.p.Router(owner) != nil {
					path = "routers." + owner
					if rt := r.p.Router(owner); rt.For != "" {
						path = "networks." + rt.For + ".uplink"
					}
				}
				r.errorf(path, "renumber one of the networks", "%s joins %s (%v) and %s (%v), which overlap", owner, b.Network, pb, a.Network, pa)
			}
		}
	}
}

// services are the plan's control, relays and STUN servers: what every
// node connects to.
func (p *Plan) services() []PlanService {
	var out []PlanService
	if p.Control != nil {
		out = append(out, *p.Control)
	}
	out = append(out, p.Relays...)
	for _, s := range p.STUN {
		out = append(out, s.PlanService)
	}
	return out
}

// reachability checks that every node can open connections to the
// services it needs: up its uplink tree and down again without crossing a
// NAT inward. With explicit routers the shape is the user's business.
func (r *resolver) reachability() {
	if r.explicit || len(r.p.Nodes) == 0 {
		return
	}
	services := r.p.services()
	reported := map[[2]string]bool{}
	for _, n := range r.p.Nodes {
		for _, s := range services {
			why := r.blocked(n.Network, r.hostNet(s.Host))
			key := [2]string{n.Group, s.Name}
			if why == "" || reported[key] {
				continue
			}
			reported[key] = true
			r.errorf("nodes."+n.Group, "put services on the top network (the internet) or on the node's side of every NAT",
				"node %s on %s cannot reach %s: %s", n.Name, n.Network, s.Name, why)
		}
	}
}

// blocked says why a host on network from cannot open connections to one
// on network to, or "" if it can.
func (r *resolver) blocked(from, to string) string {
	var up []string
	for _, end := range []string{from, to} {
		for cur := end; cur != ""; cur = r.nets[cur].parent {
			if r.nets[cur] == nil || r.nets[cur].broken {
				return "" // its uplink's problem is reported
			}
		}
	}
	for cur := from; cur != ""; cur = r.nets[cur].parent {
		up = append(up, cur)
	}
	for cur := to; cur != ""; cur = r.nets[cur].parent {
		if slices.Contains(up, cur) {
			return ""
		}
		if info := r.nets[cur]; info.nat {
			return fmt.Sprintf("%s is behind %s, and a NAT lets no connection in", to, info.gwName)
		}
		if r.nets[cur].parent == "" {
			break
		}
	}
	return fmt.Sprintf("%s and %s have no uplink in common", from, to)
}
