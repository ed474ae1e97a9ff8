package nat

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Proto is a transport protocol as firewall rules and mappings see it.
type Proto int

const (
	// Any matches every protocol in a Rule. Zero value. Packets themselves
	// are never Any.
	Any Proto = iota
	// TCP is IP protocol 6.
	TCP
	// UDP is IP protocol 17.
	UDP
	// ICMP is IP protocol 1. ICMP has no ports: a rule with Ports never
	// matches it.
	ICMP
)

var protoNames = []string{"any", "tcp", "udp", "icmp"}

// String returns "any", "tcp", "udp" or "icmp".
func (p Proto) String() string { return enumString(protoNames, "Proto", int(p)) }

func (p Proto) valid() bool { return p >= 0 && int(p) < len(protoNames) }

// ParseProto parses "any", "tcp", "udp" or "icmp".
func ParseProto(s string) (Proto, error) {
	v, err := parseEnum(protoNames, "protocol", s)
	return Proto(v), err
}

// Action is what a firewall Rule does with the packets it matches.
type Action int

const (
	// Allow lets the packet through. Zero value.
	Allow Action = iota
	// Deny drops the packet.
	Deny
)

var actionNames = []string{"allow", "deny"}

// String returns "allow" or "deny".
func (a Action) String() string { return enumString(actionNames, "Action", int(a)) }

func (a Action) valid() bool { return a >= 0 && int(a) < len(actionNames) }

// ParseAction parses "allow" or "deny".
func ParseAction(s string) (Action, error) {
	v, err := parseEnum(actionNames, "firewall action", s)
	return Action(v), err
}

// PortRange is the inclusive port range First..Last. A single port has
// First == Last.
type PortRange struct {
	First, Last uint16
}

// Port returns the range holding just p.
func Port(p uint16) PortRange { return PortRange{First: p, Last: p} }

// Contains reports whether p lies in the range.
func (r PortRange) Contains(p uint16) bool { return r.First <= p && p <= r.Last }

// String returns "53" or "1024-65535".
func (r PortRange) String() string {
	if r.First == r.Last {
		return strconv.Itoa(int(r.First))
	}
	return strconv.Itoa(int(r.First)) + "-" + strconv.Itoa(int(r.Last))
}

// Rule matches outbound packets by protocol, destination prefix and
// destination port. Every zero field matches anything.
type Rule struct {
	// Action is applied to matching packets.
	Action Action
	// Proto restricts the rule to one protocol. If zero (Any), every
	// protocol matches.
	Proto Proto
	// Dst restricts the rule to destinations inside the IPv4 prefix. If
	// zero, every destination matches.
	Dst netip.Prefix
	// Ports restricts the rule to TCP and UDP destination ports inside one
	// of the ranges. If empty, every port matches (and so does ICMP).
	Ports []PortRange
}

// String describes the rule, e.g. "allow tcp to 10.0.0.0/8 ports 80,443".
func (r Rule) String() string {
	var b strings.Builder
	b.WriteString(r.Action.String())
	b.WriteByte(' ')
	b.WriteString(r.Proto.String())
	if r.Dst.IsValid() {
		b.WriteString(" to ")
		b.WriteString(r.Dst.String())
	}
	if len(r.Ports) > 0 {
		if len(r.Ports) == 1 && r.Ports[0].First == r.Ports[0].Last {
			b.WriteString(" port ")
		} else {
			b.WriteString(" ports ")
		}
		for i, pr := range r.Ports {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(pr.String())
		}
	}
	return b.String()
}

// matches reports whether the rule covers a packet of proto to dst.
func (r *Rule) matches(proto Proto, dst netip.AddrPort) bool {
	if r.Proto != Any && r.Proto != proto {
		return false
	}
	if r.Dst.IsValid() && !r.Dst.Contains(dst.Addr()) {
		return false
	}
	if len(r.Ports) == 0 {
		return true
	}
	if proto != TCP && proto != UDP {
		return false
	}
	for _, pr := range r.Ports {
		if pr.Contains(dst.Port()) {
			return true
		}
	}
	return false
}

func (r Rule) validate() error {
	if !r.Action.valid() {
		return fmt.Errorf("unknown action %d", int(r.Action))
	}
	if !r.Proto.valid() {
		return fmt.Errorf("unknown protocol %d", int(r.Proto))
	}
	if r.Dst != (netip.Prefix{}) {
		if !r.Dst.IsValid() {
			return fmt.Errorf("invalid destination prefix %s", r.Dst)
		}
		if !r.Dst.Addr().Is4() {
			return fmt.Errorf("destination %s is not IPv4", r.Dst)
		}
	}
	if len(r.Ports) > 0 && r.Proto == ICMP {
		return fmt.Errorf("icmp has no ports")
	}
	for _, pr := range r.Ports {
		if pr.First > pr.Last {
			return fmt.Errorf("port range %d-%d is empty", pr.First, pr.Last)
		}
	}
	return nil
}

// Firewall is a stateless, first-match-wins filter over packets leaving the
// inside network. The NAT applies it to every FromInside packet before the
// packet touches the mapping table; what comes back in is governed by
// mappings and filtering, so a Firewall needs no rules for replies. A router
// without NAT may call Check directly.
//
// The zero Firewall allows everything.
type Firewall struct {
	// Rules are tried in order; the first that matches decides.
	Rules []Rule
	// DefaultDeny drops packets no rule matches. If false, they pass.
	DefaultDeny bool
}

// Validate reports the first invalid rule, numbered from 1 as in Check's
// reasons: "nat: firewall rule 2: port range 90-80 is empty".
func (f Firewall) Validate() error {
	for i, r := range f.Rules {
		if err := r.validate(); err != nil {
			return invalid(fmt.Sprintf("firewall rule %d: %v", i+1, err))
		}
	}
	return nil
}

// Check decides a packet of proto (TCP, UDP or ICMP) to dst; for ICMP the
// port is ignored. The reason names the deciding rule, numbered from 1:
// "dropped by firewall rule 2 (deny udp)", "dropped by firewall default
// deny", "allowed by firewall rule 1 (allow udp port 53)" or "allowed by
// firewall default allow".
func (f Firewall) Check(proto Proto, dst netip.AddrPort) (allowed bool, reason string) {
	i := f.match(proto, dst)
	if i < 0 {
		if f.DefaultDeny {
			return false, "dropped by firewall default deny"
		}
		return true, "allowed by firewall default allow"
	}
	r := f.Rules[i]
	if r.Action == Deny {
		return false, fmt.Sprintf("dropped by firewall rule %d (%s)", i+1, r)
	}
	return true, fmt.Sprintf("allowed by firewall rule %d (%s)", i+1, r)
}

// match returns the index of the first rule matching the packet, or -1.
// It does not allocate: the NAT calls it for every outbound packet.
func (f *Firewall) match(proto Proto, dst netip.AddrPort) int {
	for i := range f.Rules {
		if f.Rules[i].matches(proto, dst) {
			return i
		}
	}
	return -1
}

// allows is Check without the reason, for the hot path.
func (f *Firewall) allows(proto Proto, dst netip.AddrPort) (ok bool, rule int) {
	i := f.match(proto, dst)
	if i < 0 {
		return !f.DefaultDeny, -1
	}
	return f.Rules[i].Action == Allow, i
}

// denyReason is Check's reason for a packet allows refused.
func (f *Firewall) denyReason(rule int) string {
	if rule < 0 {
		return "dropped by firewall default deny"
	}
	return fmt.Sprintf("dropped by firewall rule %d (%s)", rule+1, f.Rules[rule])
}

// clone returns a copy sharing no slices with f.
func (f Firewall) clone() Firewall {
	c := Firewall{DefaultDeny: f.DefaultDeny, Rules: make([]Rule, len(f.Rules))}
	for i, r := range f.Rules {
		r.Ports = append([]PortRange(nil), r.Ports...)
		c.Rules[i] = r
	}
	return c
}

// SetFirewall replaces the NAT's firewall while traffic flows, as an
// operator editing rules on a live router would; mappings are kept.
func (n *NAT) SetFirewall(fw Firewall) error {
	if err := fw.Validate(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cfg.Firewall = fw.clone()
	return nil
}
