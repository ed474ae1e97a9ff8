package runner

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/latticelab/lattice/lab/dns"
	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/lab/topology"
)

// reach is how a node reaches control, and the NAT64 prefix it embeds
// IPv4 relays in (node.Config.NAT64), if it has one.
type reach struct {
	control string
	nat64   netip.Prefix
}

// nodeReach finds how a node reaches control from the families it has. A
// node with IPv4 uses control's IPv4 address, as it always did. An
// IPv6-only one uses control's IPv6 address, or behind a NAT64 what a
// host there would: with a DNS64 in the topology it asks it, from the
// node's host, for control's AAAA (synthesized where control has only
// IPv4) and for the NAT64 prefix (RFC 7050); without one it embeds
// control's IPv4 address in its NAT64's prefix.
func (l *Lab) nodeReach(ctx context.Context, pn *topology.PlanNode) (reach, error) {
	c := l.plan.Control
	if pn.Addr.Is4() {
		return reach{control: l.controlURL()}, nil
	}
	prefix := l.nat64Of(pn)
	if server, ok := l.dns64For(prefix); ok {
		host := l.hostNet(pn.Host)
		p, err := dns.Prefix64(ctx, host, server)
		if err != nil {
			return reach{}, fmt.Errorf("NAT64 prefix from the DNS64: %w", err)
		}
		addrs, err := dns.LookupAAAA(ctx, host, server, "control."+topology.Zone)
		if err != nil {
			return reach{}, fmt.Errorf("control's address from the DNS64: %w", err)
		}
		return reach{control: l.controlURLAt(netip.AddrPortFrom(addrs[0], c.Addr.Port())), nat64: p}, nil
	}
	switch {
	case c.Addr.Addr().Is6():
		return reach{control: l.controlURL(), nat64: prefix}, nil
	case c.Addr6.IsValid():
		return reach{control: l.controlURLAt(c.Addr6), nat64: prefix}, nil
	case prefix.IsValid():
		return reach{control: l.controlURLAt(netip.AddrPortFrom(nat.Embed64(prefix, c.Addr.Addr()), c.Addr.Port())), nat64: prefix}, nil
	}
	return reach{}, fmt.Errorf("node has only IPv6 and control only IPv4 (%v), with no NAT64 between", c.Addr.Addr())
}

// nat64Of is the prefix of the innermost NAT64 above a node, if any.
func (l *Lab) nat64Of(pn *topology.PlanNode) netip.Prefix {
	for _, name := range pn.NATs {
		if r := l.plan.Router(name); r != nil && r.Config.NAT64 != nil {
			if p := r.Config.NAT64.Prefix; p.IsValid() {
				return p
			}
			return nat.WellKnownPrefix64
		}
	}
	return netip.Prefix{}
}

// dns64For is the IPv6 address of a DNS server synthesizing under
// prefix, if the topology has one.
func (l *Lab) dns64For(prefix netip.Prefix) (netip.AddrPort, bool) {
	if !prefix.IsValid() {
		return netip.AddrPort{}, false
	}
	for _, d := range l.plan.DNS {
		if d.DNS64 != prefix {
			continue
		}
		for _, a := range d.Addrs() {
			if a.Addr().Is6() {
				return a, true
			}
		}
	}
	return netip.AddrPort{}, false
}

// advertiseNATS lists where control tells nodes its NATS is: its address,
// its IPv6 twin, and where it has no IPv6 its IPv4 address in each NAT64
// prefix of the topology, which is what a name for it resolves to through
// those networks' DNS64 (lab nodes have no resolver). A node's NATS client
// tries them until one connects, so each dials what it can reach. Empty
// when control has one address and no NAT64 needs another.
func (l *Lab) advertiseNATS() string {
	c := l.plan.Control
	urls := []string{"nats://" + c.Addr.String()}
	if c.Addr6.IsValid() {
		urls = append(urls, "nats://"+c.Addr6.String())
	}
	if c.Addr.Addr().Is4() && !c.Addr6.IsValid() {
		seen := map[netip.Prefix]bool{}
		for i := range l.plan.Nodes {
			if p := l.nat64Of(&l.plan.Nodes[i]); p.IsValid() && !seen[p] {
				seen[p] = true
				urls = append(urls, "nats://"+netip.AddrPortFrom(nat.Embed64(p, c.Addr.Addr()), c.Addr.Port()).String())
			}
		}
	}
	if len(urls) == 1 {
		return ""
	}
	return strings.Join(urls, ",")
}
