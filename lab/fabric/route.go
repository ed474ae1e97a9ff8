package fabric

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// Route sends traffic for Dst through the gateway Via, which must be on one
// of the node's networks.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

type routeEntry struct {
	dst netip.Prefix
	ifc *Interface
	via netip.Addr // invalid for connected routes: the destination itself is the next hop
}

// routeTable is ordered longest prefix first, so the first match wins.
type routeTable []routeEntry

// buildRoutes makes a node's table: a connected route per interface and
// prefix, then static routes and the default routes through gateway (IPv4)
// and gateway6 (IPv6), either of which may be zero.
func buildRoutes(owner string, ifcs []*Interface, gateway, gateway6 netip.Addr, routes []Route) (routeTable, error) {
	var t routeTable
	for _, ifc := range ifcs {
		for _, p := range []netip.Prefix{ifc.network.prefix, ifc.network.prefix6} {
			if p.IsValid() {
				t = append(t, routeEntry{dst: p, ifc: ifc})
			}
		}
	}
	routes = append([]Route(nil), routes...)
	if gateway.IsValid() {
		if !gateway.Is4() {
			return nil, fmt.Errorf("%w: %q: gateway %v is not an IPv4 address (IPv6 gateways go in Gateway6)", ErrInvalid, owner, gateway)
		}
		routes = append(routes, Route{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Via: gateway})
	}
	if gateway6.IsValid() {
		if gateway6.Is4() {
			return nil, fmt.Errorf("%w: %q: IPv6 gateway %v is an IPv4 address", ErrInvalid, owner, gateway6)
		}
		routes = append(routes, Route{Dst: netip.PrefixFrom(netip.IPv6Unspecified(), 0), Via: gateway6})
	}
	seen := map[netip.Prefix]bool{}
	for _, r := range routes {
		if !r.Dst.IsValid() || r.Dst.Addr().Is4In6() {
			return nil, fmt.Errorf("%w: %q: route to %v: destination must be an IPv4 or IPv6 prefix", ErrInvalid, owner, r.Dst)
		}
		if r.Dst != r.Dst.Masked() {
			return nil, fmt.Errorf("%w: %q: route to %v has host bits set (did you mean %v?)", ErrInvalid, owner, r.Dst, r.Dst.Masked())
		}
		if seen[r.Dst] {
			return nil, fmt.Errorf("%w: %q: two routes to %v", ErrInvalid, owner, r.Dst)
		}
		seen[r.Dst] = true
		if r.Via.IsValid() && r.Via.Is4() != r.Dst.Addr().Is4() {
			return nil, fmt.Errorf("%w: %q: route to %v via %v: gateway and destination are of different families", ErrInvalid, owner, r.Dst, r.Via)
		}
		ifc := addrOnLink(ifcs, r.Via)
		if !r.Via.IsValid() || ifc == nil {
			return nil, fmt.Errorf("%w: %q: route to %v via %v: gateway is not on any of its networks", ErrInvalid, owner, r.Dst, r.Via)
		}
		if ifc.owns(r.Via) {
			return nil, fmt.Errorf("%w: %q: route to %v via %v: gateway is its own address", ErrInvalid, owner, r.Dst, r.Via)
		}
		t = append(t, routeEntry{dst: r.Dst, ifc: ifc, via: r.Via})
	}
	sort.SliceStable(t, func(i, j int) bool { return t[i].dst.Bits() > t[j].dst.Bits() })
	return t, nil
}

func (t routeTable) lookup(a netip.Addr) *routeEntry {
	for i := range t {
		if t[i].dst.Contains(a) {
			return &t[i]
		}
	}
	return nil
}

// checkLoopsLocked follows every static route of every router hop by hop and
// reports a destination whose path returns to a router it already visited.
// Routes through gateways not attached yet are followed as far as they go;
// the check runs again whenever a router is added.
func (f *Fabric) checkLoopsLocked(extra *Router) error {
	routers := make([]*Router, 0, len(f.routers)+1)
	for _, r := range f.routers {
		routers = append(routers, r)
	}
	if extra != nil {
		routers = append(routers, extra)
	}
	sort.Slice(routers, func(i, j int) bool { return routers[i].name < routers[j].name })
	// Next hops resolve on the network the route leaves through: sites
	// behind different NATs may reuse the same addresses.
	type hop struct {
		network *Network
		addr    netip.Addr
	}
	byAddr := map[hop]*Router{}
	for _, r := range routers {
		for _, ifc := range r.ifcs {
			for _, a := range ifc.Addrs() {
				byAddr[hop{ifc.network, a}] = r
			}
		}
	}
	for _, start := range routers {
		for _, rt := range start.routes {
			if !rt.via.IsValid() {
				continue
			}
			probe := rt.dst.Addr()
			path := []string{start.name}
			visited := map[*Router]bool{start: true}
			cur := start
			for range 256 {
				e := cur.routes.lookup(probe)
				if e == nil || !e.via.IsValid() {
					break
				}
				next := byAddr[hop{e.ifc.network, e.via}]
				if next == nil {
					break // a host, or a gateway not attached yet
				}
				path = append(path, next.name)
				if visited[next] {
					return fmt.Errorf("%w: route loop for %v: %s", ErrInvalid, rt.dst, strings.Join(path, " → "))
				}
				visited[next] = true
				cur = next
			}
		}
	}
	return nil
}
