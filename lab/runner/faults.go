package runner

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/topology"
	"github.com/latticelab/lattice/stun"
)

// iface finds the interface a link reference means.
func (l *Lab) iface(ref string) (*fabric.Interface, error) {
	owner, name, err := scenario.ResolveLink(l.plan, ref)
	if err != nil {
		return nil, err
	}
	if h := l.f.Host(owner); h != nil {
		return h.Interface(name), nil
	}
	if k := l.f.KernelHost(owner); k != nil {
		return k.Interface(), nil // its one interface
	}
	return l.f.Router(owner).Interface(name), nil
}

// SetLinkDown unplugs (or plugs back) a link.
func (l *Lab) SetLinkDown(ref string, down bool) error {
	ifc, err := l.iface(ref)
	if err != nil {
		return err
	}
	ifc.SetDown(down)
	return nil
}

// Impair replaces a link's impairments in both directions.
func (l *Lab) Impair(ref string, set topology.Link) error {
	ifc, err := l.iface(ref)
	if err != nil {
		return err
	}
	for _, dir := range []fabric.Direction{fabric.Egress, fabric.Ingress} {
		im := set.Impairments
		if dir == fabric.Egress && set.Egress != nil {
			im = *set.Egress
		}
		if dir == fabric.Ingress && set.Ingress != nil {
			im = *set.Ingress
		}
		if err := ifc.SetImpairments(dir, im.Link()); err != nil {
			return err
		}
	}
	return nil
}

// BlockUDP makes a NAT router drop every outbound UDP packet, or restores
// its configured firewall.
func (l *Lab) BlockUDP(ref scenario.RouterRef, block bool) (string, error) {
	router, err := scenario.ResolveRouter(l.plan, ref)
	if err != nil {
		return "", err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fw[router].blockUDP = block
	return router, l.applyFirewall(router)
}

// RebootNAT drops every mapping of a NAT.
func (l *Lab) RebootNAT(ref scenario.RouterRef) (string, int, error) {
	router, err := scenario.ResolveRouter(l.plan, ref)
	if err != nil {
		return "", 0, err
	}
	n := l.f.Router(router).NAT()
	lost := len(n.Mappings(l.clock.Now()))
	n.Reboot()
	return router, lost, nil
}

// AdvanceClock moves the NAT clock forward.
func (l *Lab) AdvanceClock(d time.Duration) { l.clock.Advance(d) }

// publicAddr is where a node's packets appear to come from on the
// internet: its outermost NAT's address, or its own.
func (l *Lab) publicAddr(pn *topology.PlanNode) netip.Addr {
	if len(pn.NATs) == 0 {
		return pn.Addr
	}
	r := l.plan.Router(pn.NATs[len(pn.NATs)-1])
	for _, ifc := range r.Config.Interfaces {
		if ifc.Name == r.Config.Uplink {
			return ifc.Addr
		}
	}
	return netip.Addr{}
}

// Blackhole drops UDP between two nodes' public addresses in their
// outermost NATs' firewalls, so their direct path dies while the relay
// (TCP) keeps working; heal removes the rules.
func (l *Lab) Blackhole(a, b string, on bool) error {
	pa, pb := l.plan.Node(a), l.plan.Node(b)
	if pa == nil || pb == nil {
		return fmt.Errorf("no node %q or %q", a, b)
	}
	key := min(a, b) + "|" + max(a, b)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, side := range [][2]*topology.PlanNode{{pa, pb}, {pb, pa}} {
		self, other := side[0], side[1]
		if len(self.NATs) == 0 {
			continue
		}
		router := self.NATs[len(self.NATs)-1]
		st := l.fw[router]
		if st.holes == nil {
			st.holes = map[string]nat.Rule{}
		}
		if on {
			st.holes[key] = nat.Rule{Action: nat.Deny, Proto: nat.UDP, Dst: netip.PrefixFrom(l.publicAddr(other), 32)}
		} else {
			delete(st.holes, key)
		}
		if err := l.applyFirewall(router); err != nil {
			return err
		}
	}
	return nil
}

// Move puts a roaming node on another of its networks.
func (l *Lab) Move(ctx context.Context, name, network string) error {
	rn, err := l.node(name)
	if err != nil {
		return err
	}
	c := rn.common()
	if c.roam == nil {
		return fmt.Errorf("node %s does not roam", name)
	}
	host := c.plan.Host
	if network != c.plan.Network {
		host = ""
		for _, r := range c.plan.Roams {
			if r.Network == network {
				host = r.Host
			}
		}
		if host == "" {
			return fmt.Errorf("node %s does not roam to %s", name, network)
		}
	}
	return c.roam.Move(ctx, l.f.Host(host), network)
}

// DiscoverNAT classifies a node's NATs with RFC 5780 tests against a STUN
// server with an alternate address, from the node's host.
func (l *Lab) DiscoverNAT(ctx context.Context, name, stunName string) (stun.Result, error) {
	pn := l.plan.Node(name)
	if pn == nil {
		return stun.Result{}, fmt.Errorf("no node %q", name)
	}
	var server netip.AddrPort
	for _, s := range l.plan.STUN {
		if s.Alternate.IsValid() && (stunName == "" || s.Name == stunName) {
			server = s.Addr
			break
		}
	}
	if !server.IsValid() {
		return stun.Result{}, fmt.Errorf("no STUN server with an alternate address")
	}
	network := l.hostNet(pn.Host)
	// The fabric loses nothing unless told to: one try, and a short wait
	// for the answers the filtering tests expect not to come.
	return stun.Discover(ctx, network, server, stun.Options{Wait: 250 * time.Millisecond, Tries: 2})
}

// ExpectedNAT is what a node's chain of NATs looks like from outside:
// as restrictive as its most restrictive member, since a packet passes
// every filter on its way in and a new outer mapping is a new endpoint.
func (l *Lab) ExpectedNAT(name string) (m, f nat.Behavior, natted bool) {
	pn := l.plan.Node(name)
	for _, r := range pn.NATs {
		cfg := l.plan.Router(r).Config.NAT
		m, f = max(m, cfg.Mapping), max(f, cfg.Filtering)
	}
	return m, f, len(pn.NATs) > 0
}

// NATMappings lists the live mappings of a node's address in the NAT of
// its own network (the first of its NATs), by the NAT clock.
func (l *Lab) NATMappings(name string) (string, time.Time, []nat.MappingInfo, error) {
	pn := l.plan.Node(name)
	if pn == nil {
		return "", time.Time{}, nil, fmt.Errorf("no node %q", name)
	}
	if len(pn.NATs) == 0 {
		return "", time.Time{}, nil, fmt.Errorf("node %s has no NAT in front of it", name)
	}
	router := pn.NATs[0]
	now := l.clock.Now()
	var out []nat.MappingInfo
	for _, m := range routerMappings(l.f.Router(router), now) {
		if m.Inside.Addr() == pn.Addr {
			out = append(out, m)
		}
	}
	return router, now, out, nil
}
