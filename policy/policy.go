package policy

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Proto is a transport protocol as a rule or a destination names it.
type Proto uint8

const (
	// ProtoAny, in a rule, matches every protocol. It is not a valid
	// Dest.Proto: Decide denies such a destination.
	ProtoAny Proto = iota
	// TCP is the Transmission Control Protocol.
	TCP
	// UDP is the User Datagram Protocol.
	UDP
	// ICMP is ICMPv4 or ICMPv6. It has no ports.
	ICMP
)

func (p Proto) String() string {
	switch p {
	case ProtoAny:
		return "any"
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case ICMP:
		return "icmp"
	}
	return fmt.Sprintf("Proto(%d)", uint8(p))
}

// DefaultOverlay is the overlay prefix Parse and Load assume; see
// Policy.WithOverlay.
var DefaultOverlay = netip.MustParsePrefix("100.64.0.0/10")

// Dest is a destination an egress decision is asked about.
type Dest struct {
	// Addr is the destination address. IPv4-mapped IPv6 addresses are
	// treated as IPv4, and zones are ignored.
	Addr netip.Addr
	// Port is the destination port; ignored for ICMP.
	Port uint16
	// Proto is TCP, UDP or ICMP; anything else is denied.
	Proto Proto
	// Overlay says the destination is on the overlay network. The caller's
	// word is final: the policy does not check Addr against the overlay
	// prefix.
	Overlay bool
	// Peer is the destination's node name when Overlay is true and the
	// name is known; empty otherwise.
	Peer string
	// Host says Addr is one of the sandbox host's own addresses (the
	// caller's word, as for Overlay): it is denied ("host address")
	// unless a rule names that one address.
	Host bool
}

// Decision is the outcome of Decide.
type Decision struct {
	// Allow says whether the connection may proceed.
	Allow bool
	// Rule says why, for the audit log: a rule as "policy.yaml:7 deny
	// 10.0.0.0/8", or one of the built-in reasons: a default-denied
	// range's (see DefaultDenied: "metadata", "loopback", "unspecified",
	// "link-local", "loopback via nat64", ...), "host address", "overlay
	// peer not named", "default allow", "default deny", "invalid
	// destination", "no policy".
	Rule string
}

// Built-in decisions. Their Rule strings are part of the audit log format.
var (
	decisionOverlay   = Decision{Allow: false, Rule: "overlay peer not named"}
	decisionInvalid   = Decision{Allow: false, Rule: "invalid destination"}
	decisionNoPolicy  = Decision{Allow: false, Rule: "no policy"}
	decisionDefAllow  = Decision{Allow: true, Rule: "default allow"}
	decisionDefDeny   = Decision{Allow: false, Rule: "default deny"}
	allowAllPeersRule = rule{allow: true, kind: targetAllPeers, decision: decisionDefAllow}
)

// Policy is a parsed egress policy. It is immutable and safe for concurrent
// use; a nil *Policy denies everything ("no policy").
type Policy struct {
	source        string
	digest        string // hex SHA-256 of the file; empty for AllowAll
	defaultAllow  bool
	allowMetadata bool
	overlay       netip.Prefix
	rules         []rule
}

// AllowAll returns the policy in force when none is configured (the
// community default): every destination is allowed, overlay peers included,
// except the default-denied ranges (DefaultDenied) and the host's own
// addresses. With no policy file, an agent can reach every peer on its
// overlay.
func AllowAll() *Policy {
	return &Policy{
		source:       allowAllSource,
		defaultAllow: true,
		overlay:      DefaultOverlay,
		rules:        []rule{allowAllPeersRule},
	}
}

const allowAllSource = "none (allow all but loopback, link-local, metadata and host addresses)"

// Source returns the name the policy was parsed under (the path for Load),
// or "none (allow all but loopback, link-local, metadata and host
// addresses)".
func (p *Policy) Source() string {
	if p == nil {
		return "<none>"
	}
	return p.source
}

// Digest returns the hex SHA-256 of the policy file's bytes, for the audit
// log; empty for AllowAll.
func (p *Policy) Digest() string {
	if p == nil {
		return ""
	}
	return p.digest
}

// String summarizes the policy for logs, e.g.
// "policy.yaml (sha256 1f2e3d4c5b6a, 4 rules, default deny, metadata denied)".
func (p *Policy) String() string {
	if p == nil {
		return "<no policy>"
	}
	var b strings.Builder
	b.WriteString(p.source)
	b.WriteString(" (")
	if p.digest != "" {
		b.WriteString("sha256 ")
		b.WriteString(p.digest[:12])
		b.WriteString(", ")
		fmt.Fprintf(&b, "%d rules, ", len(p.rules))
	}
	if p.defaultAllow {
		b.WriteString("default allow, ")
	} else {
		b.WriteString("default deny, ")
	}
	if p.allowMetadata {
		b.WriteString("metadata allowed)")
	} else {
		b.WriteString("metadata denied)")
	}
	return b.String()
}

// Overlay returns the overlay prefix the policy classifies CIDR rules
// against.
func (p *Policy) Overlay() netip.Prefix {
	if p == nil {
		return DefaultOverlay
	}
	return p.overlay
}

// WithOverlay returns a copy of p whose CIDR rules name overlay peers when
// they lie within prefix instead of DefaultOverlay. An invalid prefix means
// DefaultOverlay.
func (p *Policy) WithOverlay(prefix netip.Prefix) *Policy {
	if p == nil {
		return nil
	}
	if !prefix.IsValid() {
		prefix = DefaultOverlay
	}
	q := *p
	q.overlay = prefix.Masked()
	q.rules = slices.Clone(p.rules)
	q.classify()
	return &q
}

// classify marks the CIDR rules that name overlay peers.
func (p *Policy) classify() {
	for i := range p.rules {
		r := &p.rules[i]
		r.namesOverlay = r.kind == targetPrefix && within(r.prefix, p.overlay)
	}
}

// within reports whether inner lies entirely within outer.
func within(inner, outer netip.Prefix) bool {
	return inner.Bits() >= outer.Bits() && outer.Contains(inner.Addr())
}

// Decide says whether the sandbox may connect to d, and why. The order is:
//
//  1. An invalid address or a Proto other than TCP, UDP or ICMP is denied
//     ("invalid destination").
//  2. A metadata address (see IsMetadata) is denied ("metadata") unless the
//     policy sets allow_metadata; with it, it is an ordinary destination.
//  3. An address in another default-denied range (DefaultDenied: loopback,
//     unspecified, link-local, their NAT64 and 6to4 forms), or the host's
//     own (Dest.Host), is denied with the range's reason unless a rule
//     naming it matches: a CIDR or address rule lying within that range
//     (within the single address, for a host address). The first such rule
//     that matches decides. any and wider prefixes never name them.
//  4. The rules, in file order; the first that matches decides. For an
//     overlay destination only rules that name overlay peers can match.
//  5. An overlay destination no rule matched is denied ("overlay peer not
//     named"); any other takes the default ("default allow"/"default deny").
//
// Decide does not allocate.
func (p *Policy) Decide(d Dest) Decision {
	if p == nil {
		return decisionNoPolicy
	}
	if !d.Addr.IsValid() || d.Proto < TCP || d.Proto > ICMP {
		return decisionInvalid
	}
	addr := d.Addr.Unmap().WithZone("")
	if i, ok := defaultDenied(addr); ok {
		switch {
		case !defaults[i].Metadata:
			return p.decideDefault(addr, &d, defaults[i].Prefix, defaultDecisions[i])
		case !p.allowMetadata:
			return defaultDecisions[i]
		}
	} else if d.Host {
		return p.decideDefault(addr, &d, netip.PrefixFrom(addr, addr.BitLen()), decisionHost)
	}
	for i := range p.rules {
		if p.rules[i].matches(addr, &d) {
			return p.rules[i].decision
		}
	}
	if d.Overlay {
		return decisionOverlay
	}
	if p.defaultAllow {
		return decisionDefAllow
	}
	return decisionDefDeny
}

type targetKind uint8

const (
	targetPrefix   targetKind = iota // a CIDR or a single address
	targetAny                        // "any" / "*": every non-overlay destination
	targetPeer                       // "peer:NAME"
	targetAllPeers                   // "peer:*"
)

// rule is one target of one policy rule; a rule listing several targets
// becomes several rules with the same line.
type rule struct {
	allow        bool
	kind         targetKind
	prefix       netip.Prefix // targetPrefix
	peer         string       // targetPeer
	proto        Proto        // ProtoAny matches every protocol
	ports        []portRange  // empty matches every port
	namesOverlay bool         // targetPrefix within the policy's overlay
	decision     Decision     // precomputed so Decide does not allocate
}

type portRange struct{ lo, hi uint16 }

func (r *rule) matches(addr netip.Addr, d *Dest) bool {
	if r.proto != ProtoAny && r.proto != d.Proto {
		return false
	}
	if len(r.ports) > 0 {
		if d.Proto == ICMP {
			return false
		}
		in := false
		for _, pr := range r.ports {
			if d.Port >= pr.lo && d.Port <= pr.hi {
				in = true
				break
			}
		}
		if !in {
			return false
		}
	}
	switch r.kind {
	case targetPrefix:
		if d.Overlay && !r.namesOverlay {
			return false
		}
		return r.prefix.Contains(addr)
	case targetAny:
		return !d.Overlay
	case targetPeer:
		// Node names are host names, compared case-insensitively.
		return d.Overlay && d.Peer != "" && strings.EqualFold(d.Peer, r.peer)
	case targetAllPeers:
		return d.Overlay
	}
	return false
}

// label renders the rule for Decision.Rule, e.g.
// "policy.yaml:4 allow 93.184.216.0/24 tcp ports 80,443,8000-8100".
func (r *rule) label(file string, line int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d ", file, line)
	if r.allow {
		b.WriteString("allow ")
	} else {
		b.WriteString("deny ")
	}
	switch r.kind {
	case targetPrefix:
		if r.prefix.IsSingleIP() {
			b.WriteString(r.prefix.Addr().String())
		} else {
			b.WriteString(r.prefix.String())
		}
	case targetAny:
		b.WriteString("any")
	case targetPeer:
		b.WriteString("peer:" + r.peer)
	case targetAllPeers:
		b.WriteString("peer:*")
	}
	if r.proto != ProtoAny {
		b.WriteString(" " + r.proto.String())
	}
	for i, pr := range r.ports {
		if i == 0 {
			b.WriteString(" ports ")
		} else {
			b.WriteByte(',')
		}
		if pr.lo == pr.hi {
			fmt.Fprintf(&b, "%d", pr.lo)
		} else {
			fmt.Fprintf(&b, "%d-%d", pr.lo, pr.hi)
		}
	}
	return b.String()
}

func hexDigest(sum [32]byte) string { return hex.EncodeToString(sum[:]) }
