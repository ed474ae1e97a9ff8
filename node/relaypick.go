package node

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/netx"
)

// Control announces each relay at each of its addresses (a dual-stack
// relay twice, IPv4 first). A node dials them in that order, skipping the
// ones of a family its host has no address of, and falls back to the next
// when one fails: an IPv6-only host reaches a dual-stack relay over IPv6,
// and an IPv4-only relay through its NAT64 when it knows the prefix.

// families are the address families a host has global addresses of.
type families struct{ v4, v6 bool }

// hostFamilies lists n's families, from its interfaces' addresses other
// than loopback and link-local ones. If n cannot list them, both.
func hostFamilies(n netx.Network) families {
	ifcs, err := n.Interfaces()
	if err != nil {
		return families{true, true}
	}
	var f families
	for _, ifc := range ifcs {
		for _, p := range ifc.Addrs {
			a := p.Addr().Unmap()
			if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() {
				continue
			}
			f.v4 = f.v4 || a.Is4()
			f.v6 = f.v6 || a.Is6()
		}
	}
	return f
}

// relayOrder lists the relay addresses to try, in control's order: IPv4
// ones on a host with IPv4, IPv6 ones on a host with IPv6, loopback ones
// on any host (every host has loopback, and hostFamilies does not count
// it), and last, on a host with only IPv6 and a NAT64 prefix, IPv4 ones at
// their RFC 6052 embedding in it (native IPv6 before translation, as RFC
// 6724 ranks them).
func relayOrder(relays []controlapi.Relay, f families, nat64 netip.Prefix) []controlapi.Relay {
	var out, translated []controlapi.Relay
	for _, r := range relays {
		ap, err := netip.ParseAddrPort(r.Addr)
		if err != nil {
			out = append(out, r) // a name: the dialer resolves it
			continue
		}
		a := ap.Addr().Unmap()
		switch {
		case a.IsLoopback(), a.Is6() && f.v6, a.Is4() && f.v4:
			out = append(out, r)
		case a.Is4() && f.v6 && nat64.IsValid():
			r.Addr = netip.AddrPortFrom(embed64(nat64, a), ap.Port()).String()
			translated = append(translated, r)
		}
	}
	return append(out, translated...)
}

// embed64 is a in a /96 NAT64 prefix (RFC 6052 section 2.2).
func embed64(p netip.Prefix, a netip.Addr) netip.Addr {
	b, v4 := p.Addr().As16(), a.As4()
	copy(b[12:], v4[:])
	return netip.AddrFrom16(b)
}

// dialRelay connects to the first relay address in relayOrder that
// answers, if control named any.
func (n *Node) dialRelay(ctx context.Context, resp *controlapi.RegisterResponse) error {
	if len(resp.Relays) == 0 {
		return nil
	}
	dial := n.cfg.Relay
	if dial == nil {
		dial = LRPRelay(n.cfg.Network, n.log, n.cfg.RelayTransport)
	}
	order := relayOrder(resp.Relays, hostFamilies(n.cfg.Network), n.cfg.NAT64)
	if len(order) == 0 {
		return fmt.Errorf("node: no relay address of a family this host has (relays: %v)", resp.Relays)
	}
	var errs []error
	for _, r := range order {
		rc, err := dial(ctx, r, RelayAuth{Self: n.id.PublicKey(), Token: resp.RelayToken, Renew: n.renewRelayToken}, n.bind.DeliverRelayed)
		if err != nil {
			n.log.Warn("relay unreachable", "relay", r.Addr, "err", err)
			errs = append(errs, fmt.Errorf("relay %s: %w", r.Addr, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		n.relay = rc
		n.bind.SetRelay(rc)
		return nil
	}
	return fmt.Errorf("node: %w", errors.Join(errs...))
}
