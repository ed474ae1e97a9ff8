package node

import (
	"context"
	"net"
	"net/netip"
	"slices"

	"github.com/latticelab/lattice/netx"
)

// withoutOverlay is the node's Network as ICE sees it: the overlay is not
// one of its interfaces. In kernel mode the overlay interface is an
// ordinary interface of the host, and pion's UDPMux, whose socket listens
// on every address, offers each interface address as a host candidate
// (agent filters do not apply to those). A candidate on the overlay asks
// the peer to reach us through the tunnel the candidate is meant to
// build: never usable, and it lengthens every checklist. So the interface
// carrying our overlay address is left out whole (its link-local address
// too), and the address itself wherever it shows up. The whole overlay
// prefix is not filtered: carrier-grade NATs number real networks from
// 100.64.0.0/10 as well.
type withoutOverlay struct {
	netx.Network
	overlay netip.Addr
}

// Interfaces implements netx.Network.
func (w withoutOverlay) Interfaces() ([]netx.Interface, error) {
	ifs, err := w.Network.Interfaces()
	if err != nil {
		return nil, err
	}
	isOverlay := func(p netip.Prefix) bool { return p.Addr().Unmap() == w.overlay }
	out := make([]netx.Interface, 0, len(ifs))
	for _, ifc := range ifs {
		if slices.ContainsFunc(ifc.Addrs, isOverlay) {
			continue
		}
		out = append(out, ifc)
	}
	return out, nil
}

// LookupNetIP passes name lookups (STUN servers by name) to the
// underlying Network's resolver, which embedding alone would hide.
func (w withoutOverlay) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if r, ok := w.Network.(netx.Resolver); ok {
		return r.LookupNetIP(ctx, network, host)
	}
	return nil, netx.ErrNoResolver
}

var _ netx.Resolver = withoutOverlay{}

// hostCandidateFilter is the agents' IP filter (it applies to the
// addresses server-reflexive gathering binds to). keep, if set, is
// ICEConfig.Candidates; otherwise loopback is left out, since it would
// pair with the peer's own loopback. The overlay address never passes.
func hostCandidateFilter(overlay netip.Addr, keep func(netip.Addr) bool) func(net.IP) bool {
	return func(ip net.IP) bool {
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			return false
		}
		a = a.Unmap()
		switch {
		case a == overlay:
			return false
		case keep != nil:
			return keep(a)
		}
		return !a.IsLoopback()
	}
}
