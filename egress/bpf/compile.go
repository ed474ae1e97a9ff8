package bpf

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/latticelab/lattice/policy"
)

// MaxClauses is how many rules the kernel program walks for one
// destination prefix: the rules whose destination contains the prefix, in
// file order, up to the first that matches every port and protocol.
const MaxClauses = 32

// Fixed rule ids the program itself reports; compiled rules follow them.
const (
	ruleInvalid  = 0 // not TCP, UDP or ICMP, or a truncated header
	ruleNoPolicy = 1 // no map entry: the program runs without a policy
	firstRuleID  = 2
)

// clause is one rule as the program checks it for one destination prefix.
type clause struct {
	proto  policy.Proto // ProtoAny matches every protocol
	allow  bool
	lo, hi uint16 // inclusive; 0-65535 for "every port"
	rule   uint16 // index into table.labels
}

func (c clause) matchesAll() bool { return c.proto == policy.ProtoAny && c.lo == 0 && c.hi == 0xffff }

// entry is the LPM trie value for one prefix.
type entry struct {
	prefix  netip.Prefix
	clauses []clause
}

// table is a policy translated for the kernel: one LPM entry per prefix
// any rule, default-denied range or the overlay names, and the labels the
// events report.
type table struct {
	entries []entry
	labels  []string
}

// target is one destination prefix of one policy rule.
type target struct {
	prefix  netip.Prefix
	overlay int8 // +1 matches only overlay destinations, -1 only others, 0 both (a prefix naming the overlay)
	// prefixRule says the rule is a CIDR or address rule: only those open
	// default-denied ranges and host addresses.
	prefixRule bool
	rule       int // index into rules
}

// compileInput is what compile needs besides the policy.
type compileInput struct {
	// peers maps lower-case overlay node names to their addresses.
	peers map[string][]netip.Addr
	// hosts are the host's own addresses (Dest.Host).
	hosts []netip.Addr
}

var (
	all4 = netip.MustParsePrefix("0.0.0.0/0")
	all6 = netip.MustParsePrefix("::/0")
	// mapped is the IPv4-mapped range: the program looks IPv4 up there.
	mapped = netip.MustParsePrefix("::ffff:0.0.0.0/96")
)

// compile translates p into per-prefix clause lists with Policy.Decide's
// semantics for a destination whose Overlay is "within p.Overlay()" and
// whose Host is "one of in.hosts".
func compile(p *policy.Policy, in compileInput) (*table, error) {
	t := &table{labels: []string{"invalid destination", "no policy"}}
	if p == nil {
		deny := []clause{catchAll(false, ruleNoPolicy)}
		t.entries = []entry{{all4, deny}, {all6, deny}}
		return t, nil
	}
	rules := p.Rules()
	targets := make([]target, 0, len(rules))
	ov := p.Overlay()
	for i, r := range rules {
		switch r.Target {
		case policy.TargetPrefix:
			o := int8(-1)
			if r.NamesOverlay {
				o = 0
			}
			targets = append(targets, target{prefix: r.Prefix, overlay: o, prefixRule: true, rule: i})
		case policy.TargetAny:
			targets = append(targets, target{prefix: all4, overlay: -1, rule: i}, target{prefix: all6, overlay: -1, rule: i})
		case policy.TargetPeer:
			for _, a := range in.peers[strings.ToLower(r.Peer)] {
				a = a.Unmap()
				targets = append(targets, target{prefix: netip.PrefixFrom(a, a.BitLen()), overlay: 1, rule: i})
			}
		case policy.TargetAllPeers:
			targets = append(targets, target{prefix: ov, overlay: 1, rule: i})
		default:
			return nil, fmt.Errorf("bpf: rule %s: unknown target %q", r.Label, r.Target)
		}
	}
	for _, r := range rules {
		t.labels = append(t.labels, r.Label)
	}
	defaults := policy.DefaultDenied()
	keys := newKeySet()
	keys.add(all4, all6, ov)
	for _, d := range defaults {
		keys.add(d.Prefix)
	}
	for _, h := range in.hosts {
		h = h.Unmap()
		keys.add(netip.PrefixFrom(h, h.BitLen()))
	}
	for _, tg := range targets {
		keys.add(tg.prefix)
	}
	c := compiler{p: p, t: t, rules: rules, builtin: map[string]uint16{}, targets: targets, defaults: defaults, hosts: in.hosts, overlay: ov,
		byPrefix: map[netip.Prefix][]int{}}
	for i, tg := range targets {
		pf := tg.prefix.Masked()
		c.byPrefix[pf] = append(c.byPrefix[pf], i)
	}
	for _, k := range keys.list {
		cl := c.clauses(k)
		if len(cl) > MaxClauses {
			return nil, fmt.Errorf("bpf: destination %s is named by %d rules and defaults; the kernel filter walks at most %d", k, len(cl), MaxClauses)
		}
		t.entries = append(t.entries, entry{k, cl})
	}
	if len(t.labels) > 0xffff {
		return nil, fmt.Errorf("bpf: %d rules: the kernel filter takes at most %d", len(rules), 0xffff-32)
	}
	return t, nil
}

type compiler struct {
	p        *policy.Policy
	t        *table
	rules    []policy.RuleView
	builtin  map[string]uint16
	byPrefix map[netip.Prefix][]int // targets by their prefix, in rule order
	scratch  []int
	targets  []target
	defaults []policy.Denied
	hosts    []netip.Addr
	overlay  netip.Prefix
}

// label returns the id of a built-in reason, adding it once.
func (c *compiler) label(s string) uint16 {
	if id, ok := c.builtin[s]; ok {
		return id
	}
	c.t.labels = append(c.t.labels, s)
	id := uint16(len(c.t.labels) - 1)
	c.builtin[s] = id
	return id
}

// clauses walks Decide's steps for every address whose longest key is k.
func (c *compiler) clauses(k netip.Prefix) []clause {
	overlay := within(k, c.overlay)
	for _, d := range c.defaults {
		if !within(k, d.Prefix) {
			continue
		}
		if d.Metadata {
			if c.p.AllowsMetadata() {
				break // an ordinary destination
			}
			return []clause{catchAll(false, c.label(d.Reason))}
		}
		return c.scoped(k, d.Prefix, overlay, d.Reason)
	}
	for _, h := range c.hosts {
		h = h.Unmap()
		if hp := netip.PrefixFrom(h, h.BitLen()); hp == k {
			if _, inDefault := c.defaultOf(k); !inDefault {
				return c.scoped(k, hp, overlay, policy.ReasonHostAddress)
			}
		}
	}
	var out []clause
	for _, i := range c.containing(k) {
		tg := c.targets[i]
		if (overlay && tg.overlay < 0) || (!overlay && tg.overlay > 0) {
			continue
		}
		if out = c.appendRule(out, tg.rule); len(out) > 0 && out[len(out)-1].matchesAll() {
			return out
		}
	}
	switch {
	case overlay:
		return append(out, catchAll(false, c.label("overlay peer not named")))
	case c.p.DefaultAllows():
		return append(out, catchAll(true, c.label("default allow")))
	}
	return append(out, catchAll(false, c.label("default deny")))
}

// containing returns the indices of the targets whose prefix contains k,
// in rule order: one map lookup per prefix length, not a scan of every rule.
func (c *compiler) containing(k netip.Prefix) []int {
	c.scratch = c.scratch[:0]
	for bits := 0; bits <= k.Bits(); bits++ {
		pf, _ := k.Addr().Prefix(bits)
		c.scratch = append(c.scratch, c.byPrefix[pf]...)
	}
	slices.Sort(c.scratch)
	return c.scratch
}

func (c *compiler) defaultOf(k netip.Prefix) (policy.Denied, bool) {
	for _, d := range c.defaults {
		if within(k, d.Prefix) {
			return d, true
		}
	}
	return policy.Denied{}, false
}

// scoped is decideDefault: only address rules within scope can open it.
func (c *compiler) scoped(k, scope netip.Prefix, overlay bool, reason string) []clause {
	var out []clause
	for _, i := range c.containing(k) {
		tg := c.targets[i]
		if !tg.prefixRule || !policy.Names(tg.prefix, scope) || (overlay && tg.overlay < 0) {
			continue
		}
		if out = c.appendRule(out, tg.rule); out[len(out)-1].matchesAll() {
			return out
		}
	}
	return append(out, catchAll(false, c.label(reason)))
}

// appendRule appends one clause per port range of rule i.
func (c *compiler) appendRule(out []clause, i int) []clause {
	r := c.rules[i]
	id := uint16(firstRuleID + i)
	if len(r.Ports) == 0 {
		return append(out, clause{proto: r.Proto, allow: r.Allow, lo: 0, hi: 0xffff, rule: id})
	}
	for _, pr := range r.Ports {
		out = append(out, clause{proto: r.Proto, allow: r.Allow, lo: pr[0], hi: pr[1], rule: id})
	}
	return out
}

func catchAll(allow bool, id uint16) clause {
	return clause{proto: policy.ProtoAny, allow: allow, lo: 0, hi: 0xffff, rule: id}
}

// within reports whether inner lies entirely within outer (same family).
func within(inner, outer netip.Prefix) bool {
	return inner.Addr().Is4() == outer.Addr().Is4() && inner.Bits() >= outer.Bits() && outer.Contains(inner.Addr())
}

type keySet struct {
	seen map[netip.Prefix]bool
	list []netip.Prefix
}

func newKeySet() *keySet { return &keySet{seen: map[netip.Prefix]bool{}} }

func (s *keySet) add(ps ...netip.Prefix) {
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		p = p.Masked()
		// IPv6 prefixes inside the IPv4-mapped range never match:
		// destinations there are looked up as IPv4.
		if p.Addr().Is6() && p.Bits() >= mapped.Bits() && mapped.Contains(p.Addr()) {
			continue
		}
		if !s.seen[p] {
			s.seen[p] = true
			s.list = append(s.list, p)
		}
	}
}

// Sizes of the kernel's view of a table.
const (
	keySize    = 4 + 16
	clauseSize = 8
	valueSize  = 8 + MaxClauses*clauseSize
)

// marshalKey encodes a prefix as a bpf_lpm_trie_key: host-order length,
// then the address with IPv4 in its IPv4-mapped form.
func marshalKey(p netip.Prefix) []byte {
	b := make([]byte, keySize)
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	binary.NativeEndian.PutUint32(b, uint32(bits))
	a := p.Addr().As16()
	copy(b[4:], a[:])
	return b
}

// marshalValue encodes the clause list and the table generation.
func marshalValue(cl []clause, gen uint32) []byte {
	b := make([]byte, valueSize)
	binary.NativeEndian.PutUint32(b[0:], uint32(len(cl)))
	binary.NativeEndian.PutUint32(b[4:], gen)
	for i, c := range cl {
		o := 8 + i*clauseSize
		b[o] = byte(c.proto)
		if c.allow {
			b[o+1] = 1
		}
		binary.NativeEndian.PutUint16(b[o+2:], c.lo)
		binary.NativeEndian.PutUint16(b[o+4:], c.hi)
		binary.NativeEndian.PutUint16(b[o+6:], c.rule)
	}
	return b
}

// lookup is the program's decision in Go: the longest key containing
// addr, then the first clause matching proto and port. Tests compare it
// with Policy.Decide.
func (t *table) lookup(addr netip.Addr, proto policy.Proto, port uint16) (bool, string) {
	addr = addr.Unmap()
	best := -1
	for i, e := range t.entries {
		if e.prefix.Contains(addr) && (best < 0 || e.prefix.Bits() > t.entries[best].prefix.Bits()) {
			best = i
		}
	}
	if best < 0 {
		return false, t.labels[ruleNoPolicy]
	}
	if proto == policy.ICMP {
		port = 0
	}
	for _, c := range t.entries[best].clauses {
		if (c.proto == policy.ProtoAny || c.proto == proto) && port >= c.lo && port <= c.hi {
			return c.allow, t.labels[c.rule]
		}
	}
	return false, t.labels[ruleNoPolicy]
}
