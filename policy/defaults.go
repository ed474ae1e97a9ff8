package policy

import (
	"net/netip"
	"slices"
)

// Reasons a default-denied destination is refused with, as Decision.Rule
// says them. They are part of the audit log format.
const (
	ReasonMetadata    = "metadata"
	ReasonLoopback    = "loopback"
	ReasonUnspecified = "unspecified"
	ReasonLinkLocal   = "link-local"
	ReasonHostAddress = "host address"
)

// Denied is one range denied by default, whatever the policy's default
// and its "any" rules say.
type Denied struct {
	Prefix netip.Prefix
	// Reason is one of the Reason constants, with " via nat64" or
	// " via 6to4" for an IPv4 range embedded in those IPv6 prefixes.
	Reason string
	// Metadata says the range is a cloud metadata endpoint: allow_metadata
	// lifts it, and only that does.
	Metadata bool
}

// metadata lists the cloud metadata and credential endpoints. They hand
// out instance credentials, so a sandboxed agent reaching one could act as
// the host.
var metadata = [...]netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OCI, DigitalOcean, OpenStack IMDS
	netip.MustParseAddr("169.254.170.2"),   // AWS ECS task credentials
	netip.MustParseAddr("169.254.170.23"),  // AWS EKS Pod Identity agent
	netip.MustParseAddr("168.63.129.16"),   // Azure wire server (VM agent, certificates)
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	netip.MustParseAddr("192.0.0.192"),     // Oracle Cloud (OCI) metadata, older instances
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
	netip.MustParseAddr("fd00:ec2::23"),    // AWS EKS Pod Identity agent over IPv6
	netip.MustParseAddr("fd20:ce::254"),    // GCP metadata over IPv6
}

// NAT64 and 6to4 carry an IPv4 address inside an IPv6 one; a gateway on
// the path turns it back into IPv4, so every denied IPv4 range is denied
// inside them too.
var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052 well-known prefix
	sixToFour   = netip.MustParsePrefix("2002::/16")    // RFC 3056
)

// defaults is DefaultDenied's list, most specific first: Decide and every
// enforcer take the first range that contains an address.
var defaults = buildDefaults()

func buildDefaults() []Denied {
	var v4, v6 []Denied
	for _, a := range metadata {
		d := Denied{Prefix: netip.PrefixFrom(a, a.BitLen()), Reason: ReasonMetadata, Metadata: true}
		if a.Is4() {
			v4 = append(v4, d)
		} else {
			v6 = append(v6, d)
		}
	}
	v4 = append(v4,
		Denied{Prefix: netip.MustParsePrefix("0.0.0.0/8"), Reason: ReasonUnspecified}, // "this network"; 0.0.0.0 reaches the host itself
		Denied{Prefix: netip.MustParsePrefix("127.0.0.0/8"), Reason: ReasonLoopback},
		Denied{Prefix: netip.MustParsePrefix("169.254.0.0/16"), Reason: ReasonLinkLocal},
	)
	v6 = append(v6,
		Denied{Prefix: netip.MustParsePrefix("::/128"), Reason: ReasonUnspecified},
		Denied{Prefix: netip.MustParsePrefix("::1/128"), Reason: ReasonLoopback},
		Denied{Prefix: netip.MustParsePrefix("fe80::/10"), Reason: ReasonLinkLocal},
	)
	for _, d := range v4 {
		v6 = append(v6, embed(d, nat64Prefix, 12, " via nat64"), embed(d, sixToFour, 2, " via 6to4"))
	}
	out := append(v4, v6...)
	slices.SortStableFunc(out, func(a, b Denied) int { return b.Prefix.Bits() - a.Prefix.Bits() })
	return out
}

// embed places d's IPv4 range at byte offset off of the IPv6 prefix pfx.
func embed(d Denied, pfx netip.Prefix, off int, suffix string) Denied {
	b := pfx.Addr().As16()
	v4 := d.Prefix.Addr().As4()
	copy(b[off:off+4], v4[:])
	d.Prefix = netip.PrefixFrom(netip.AddrFrom16(b), pfx.Bits()+d.Prefix.Bits())
	d.Reason += suffix
	return d
}

// DefaultDenied returns the ranges every policy denies unless a rule names
// them (see the package documentation), most specific first. Each
// enforcer (Decide in pod mode, the pod's iptables and ip6tables in gvisor
// mode, an eBPF program) takes this one list. The sandbox host's own
// addresses are denied as well; they are not in the list because only the
// enforcer knows them (Dest.Host, or iptables' addrtype LOCAL).
func DefaultDenied() []Denied { return slices.Clone(defaults) }

// defaultDenied returns the first default range containing addr (an
// unmapped address without a zone). Most addresses are in none: a bitmap
// of the first 16 bits any range can start with, per family, answers
// those (the overlay's included) without a scan.
func defaultDenied(addr netip.Addr) (int, bool) {
	if !leads.has(addr) {
		return 0, false
	}
	for i := range defaults {
		if defaults[i].Prefix.Contains(addr) {
			return i, true
		}
	}
	return 0, false
}

// leadBits marks the first 16 bits a default range may begin with.
type leadBits struct {
	v4, v6 [65536 / 64]uint64
}

var leads = func() *leadBits {
	l := &leadBits{}
	for _, d := range defaults {
		set := &l.v6
		if d.Prefix.Addr().Is4() {
			set = &l.v4
		}
		first := lead(d.Prefix.Addr())
		for v := first; v < first+1<<max(16-d.Prefix.Bits(), 0); v++ {
			set[v/64] |= 1 << (v % 64)
		}
	}
	return l
}()

// lead is an address's first 16 bits.
func lead(a netip.Addr) int {
	if a.Is4() {
		b := a.As4()
		return int(b[0])<<8 | int(b[1])
	}
	b := a.As16()
	return int(b[0])<<8 | int(b[1])
}

func (l *leadBits) has(a netip.Addr) bool {
	set := &l.v6
	if a.Is4() {
		set = &l.v4
	}
	v := lead(a)
	return set[v/64]&(1<<(v%64)) != 0
}

// defaultDecisions[i] is the decision for defaults[i], precomputed so that
// Decide does not allocate.
var defaultDecisions = func() []Decision {
	out := make([]Decision, len(defaults))
	for i, d := range defaults {
		out[i] = Decision{Allow: false, Rule: d.Reason}
	}
	return out
}()

var decisionHost = Decision{Allow: false, Rule: ReasonHostAddress}

// IsMetadata reports whether addr is one of the cloud metadata addresses
// that policies deny unless they set allow_metadata. IPv4-mapped IPv6
// addresses and zones are seen through.
func IsMetadata(addr netip.Addr) bool {
	addr = addr.Unmap().WithZone("")
	for _, m := range metadata {
		if addr == m {
			return true
		}
	}
	return false
}

// Names reports whether a rule with this target lies within r, so that it
// can decide about addresses in r: a rule must be at least as narrow as a
// default range to open it, so any, 0.0.0.0/0 or ::/0 never do.
func Names(rule, r netip.Prefix) bool { return rule.IsValid() && within(rule, r) }

// decideDefault decides about an address in a default range, or an address
// of the host itself, scope: the first rule that names scope and matches
// decides; otherwise deny.
func (p *Policy) decideDefault(addr netip.Addr, d *Dest, scope netip.Prefix, deny Decision) Decision {
	for i := range p.rules {
		r := &p.rules[i]
		if r.kind == targetPrefix && within(r.prefix, scope) && r.matches(addr, d) {
			return r.decision
		}
	}
	return deny
}
