package nat

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Direction says which side of the NAT a packet arrived on.
type Direction int

const (
	// FromInside is a packet from the private network, heading out.
	FromInside Direction = iota
	// FromOutside is a packet that arrived on the uplink.
	FromOutside
)

// String returns "from-inside" or "from-outside".
func (d Direction) String() string {
	return enumString([]string{"from-inside", "from-outside"}, "Direction", int(d))
}

// Verdict is what the router should do with a processed packet.
type Verdict int

const (
	// Forward: route the (possibly rewritten) packet on.
	Forward Verdict = iota
	// Drop: discard the packet; Result.Reason says why.
	Drop
)

// String returns "forward" or "drop".
func (v Verdict) String() string { return enumString([]string{"forward", "drop"}, "Verdict", int(v)) }

// Result is the outcome of Process.
type Result struct {
	Verdict Verdict
	// Hairpin is set when a packet from inside addressed to the public
	// address was translated back inside: both its source and destination
	// were rewritten, and the router must route it again by its new
	// destination.
	Hairpin bool
	// Firewall is set when a firewall rule, not the NAT's filtering,
	// dropped the packet.
	Firewall bool
	// Reason says why a packet was dropped, e.g. "dropped by
	// address-and-port-dependent filtering: no mapping for udp
	// 198.51.100.7:3478 → 203.0.113.10:40001", "dropped by firewall rule 2
	// (deny udp)" or "malformed: truncated tcp header (12 bytes)". For a
	// forwarded packet that created a mapping it notes the mapping; for
	// packets of existing flows it is empty, so they cost no allocation.
	Reason string
}

// Stats are counters since New. Every processed packet is counted once:
// either Translated or one of the Dropped fields.
type Stats struct {
	Translated  uint64 // packets forwarded after rewriting, hairpinned ones included
	Hairpinned  uint64 // of Translated, packets turned back inside
	Fragments   uint64 // of Translated, IPv4 fragments
	NewMappings uint64
	Expired     uint64 // mappings removed because their timeout passed
	Reboots     uint64

	DroppedFiltered        uint64 // inbound through a mapping the filter refused
	DroppedNoMapping       uint64 // inbound with no mapping; outbound TCP non-SYN with no mapping
	DroppedFirewall        uint64
	DroppedTableFull       uint64 // MaxMappings reached
	DroppedPortsExhausted  uint64 // no free port in PortMin..PortMax
	DroppedHairpinDisabled uint64
	DroppedMalformed       uint64
	DroppedUnsupported     uint64 // other protocols and ICMP types, IPv6
}

// dropClass selects the Stats counter of a drop.
type dropClass int

const (
	dropNone dropClass = iota
	dropFiltered
	dropNoMapping
	dropFirewall
	dropTableFull
	dropPortsExhausted
	dropHairpinDisabled
	dropMalformed
	dropUnsupported
)

// MappingInfo describes a live mapping, for status pages and debugging.
type MappingInfo struct {
	Proto Proto
	// Inside is the internal endpoint; for ICMP the port is the echo
	// identifier.
	Inside netip.AddrPort
	// External is the public address and port (ICMP: identifier).
	External netip.AddrPort
	// Remote is the destination part of the mapping's key: zero under
	// endpoint-independent mapping, ip:0 under address-dependent mapping,
	// ip:port under address-and-port-dependent mapping.
	Remote netip.AddrPort
	// Peers are the remotes the internal endpoint has sent to through the
	// mapping, sorted; under address-dependent filtering with port 0. The
	// filter admits exactly these (any remote under endpoint-independent
	// filtering).
	Peers []netip.AddrPort
	// TCPState is "syn-sent", "syn-received", "established", "fin-wait",
	// "closed" or "reset" for TCP, empty otherwise.
	TCPState   string
	Created    time.Time
	LastActive time.Time // last refresh
	Expires    time.Time // the mapping is gone from this instant on
}

// NAT is an RFC 4787 / RFC 5382 / RFC 5508 network address translator over
// raw IPv4 packets. It is pure logic: it starts no goroutines and reads no
// clock, every method taking the current time instead. Safe for concurrent
// use.
type NAT struct {
	cfg Config // defaults applied, firewall cloned

	mu        sync.Mutex // guards the following fields
	tables    [3]table   // TCP, UDP, ICMP; see tableLocked
	count     int        // mappings across tables
	rng       *rand.Rand
	lastSweep time.Time
	stats     Stats
	frags     map[fragKey]fragFlow // datagrams whose first fragment passed; see fragment.go
}

// New returns a NAT with no mappings, or the Config's validation error.
func New(cfg Config) (*NAT, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Firewall = cfg.Firewall.clone()
	n := &NAT{
		cfg: cfg,
		// The second PCG word is fixed so that Seed alone decides the
		// sequence.
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x6c61747469636521)), //nolint:gosec // seeded: an emulation replays
	}
	n.resetLocked()
	return n, nil
}

func (n *NAT) resetLocked() {
	for i := range n.tables {
		n.tables[i] = newTable()
	}
	n.count = 0
	n.frags = nil
}

// Reboot drops every mapping, as a NAT that lost power would. Counters,
// the sequential cursor and the random generator carry on, so Sequential
// and Random allocation hand out different ports than before the reboot
// and peers that learned the old external endpoints stop reaching in.
func (n *NAT) Reboot() {
	n.mu.Lock()
	defer n.mu.Unlock()
	next := [3]uint32{n.tables[0].next, n.tables[1].next, n.tables[2].next}
	n.resetLocked()
	for i := range n.tables {
		n.tables[i].next = next[i]
	}
	n.stats.Reboots++
}

// Stats returns a snapshot of the counters.
func (n *NAT) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Mappings lists the mappings alive at now, ordered by protocol and
// external port. Expired mappings are removed as a side effect.
func (n *NAT) Mappings(now time.Time) []MappingInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sweepLocked(now)
	out := make([]MappingInfo, 0, n.count)
	for i := range n.tables {
		for _, m := range n.tables[i].byExt {
			info := MappingInfo{
				Proto:      m.proto,
				Inside:     m.key.inside,
				External:   netip.AddrPortFrom(n.cfg.Public, m.external),
				Remote:     m.key.remote,
				Peers:      make([]netip.AddrPort, 0, len(m.peers)),
				Created:    m.created,
				LastActive: m.last,
				Expires:    m.last.Add(n.timeout(m)),
			}
			for p := range m.peers {
				info.Peers = append(info.Peers, p)
			}
			slices.SortFunc(info.Peers, netip.AddrPort.Compare)
			if m.proto == TCP {
				info.TCPState = m.tcp.String()
			}
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b MappingInfo) int {
		return cmp.Or(cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.External.Port(), b.External.Port()))
	})
	return out
}

// Process translates one IPv4 packet crossing the NAT in direction dir,
// rewriting pkt in place (addresses, ports or echo identifiers, and the
// IPv4, TCP, UDP and ICMP checksums, incrementally per RFC 1624). The
// packet is never resized; TTL is left to the router. A dropped packet may
// have been partly examined but is never partly rewritten.
func (n *NAT) Process(now time.Time, pkt []byte, dir Direction) Result {
	var p packet
	class, reason := p.parse(pkt)
	n.mu.Lock()
	defer n.mu.Unlock()
	if class != dropNone {
		return n.dropLocked(class, reason)
	}
	if dir != FromInside && dir != FromOutside {
		return n.dropLocked(dropUnsupported, fmt.Sprintf("unsupported: direction %d", int(dir)))
	}
	if p.laterFragment() {
		return n.laterFragmentLocked(now, &p)
	}
	orig := fragKey{src: p.src, dst: p.dst, proto: p.b[9], id: p.fragID}
	var res Result
	switch {
	case dir == FromInside && p.dst == n.cfg.Public:
		res = n.hairpinLocked(now, &p)
	case dir == FromInside:
		res = n.outboundLocked(now, &p)
	default:
		res = n.inboundLocked(now, &p)
	}
	if p.more && res.Verdict != Drop {
		n.rememberFragLocked(now, orig, &p)
		n.stats.Fragments++
	}
	return res
}

func (n *NAT) dropLocked(class dropClass, reason string) Result {
	s := &n.stats
	counters := [...]*uint64{
		dropFiltered:        &s.DroppedFiltered,
		dropNoMapping:       &s.DroppedNoMapping,
		dropFirewall:        &s.DroppedFirewall,
		dropTableFull:       &s.DroppedTableFull,
		dropPortsExhausted:  &s.DroppedPortsExhausted,
		dropHairpinDisabled: &s.DroppedHairpinDisabled,
		dropMalformed:       &s.DroppedMalformed,
		dropUnsupported:     &s.DroppedUnsupported,
	}
	if c := counters[class]; c != nil {
		*c++
	}
	return Result{Verdict: Drop, Reason: reason, Firewall: class == dropFirewall}
}

// remoteEP is the outside endpoint of a packet: its destination if it goes
// out, its source if it comes in. ICMP has no remote port.
func remoteEP(p *packet, out bool) netip.AddrPort {
	ep := p.srcEP()
	if out {
		ep = p.dstEP()
	}
	if p.proto == ICMP {
		return netip.AddrPortFrom(ep.Addr(), 0)
	}
	return ep
}

// firewallLocked applies the firewall to an outbound packet.
func (n *NAT) firewallLocked(p *packet) (Result, bool) {
	ok, rule := n.cfg.Firewall.allows(p.proto, p.dstEP())
	if ok {
		return Result{}, true
	}
	return n.dropLocked(dropFirewall, n.cfg.Firewall.denyReason(rule)), false
}

// mapOutboundLocked finds or creates the mapping for an outbound packet and
// records the packet on it. isNew reports a mapping made for this packet.
func (n *NAT) mapOutboundLocked(now time.Time, p *packet) (m *mapping, isNew bool, drop Result) {
	remote := remoteEP(p, true)
	t := n.tableLocked(p.proto)
	k := flowKey{inside: p.srcEP(), remote: n.mapKey(remote)}
	m = n.lookupOutboundLocked(now, t, k)
	if m == nil {
		if p.proto == TCP && p.tcpFlags&tcpSYN == 0 {
			// RFC 5382 section 5: only a SYN opens a mapping; anything
			// else belongs to a connection the NAT does not know.
			return nil, false, n.dropLocked(dropNoMapping, fmt.Sprintf("dropped: no mapping for %s and it is not a SYN", p.String()))
		}
		var class dropClass
		var reason string
		m, class, reason = n.createLocked(now, p.proto, k)
		if m == nil {
			return nil, false, n.dropLocked(class, fmt.Sprintf("dropped: %s: %s", reason, p.String()))
		}
		isNew = true
	}
	n.noteOutboundLocked(now, m, remote, p.tcpFlags)
	return m, isNew, Result{}
}

func (n *NAT) outboundLocked(now time.Time, p *packet) Result {
	if p.proto == ICMP && !p.isEcho() {
		return n.outboundICMPErrorLocked(now, p)
	}
	if p.proto == ICMP && p.icmpType != icmpEchoRequest {
		return n.dropLocked(dropUnsupported, fmt.Sprintf("unsupported: outbound %s (inbound pings are not forwarded)", p.String()))
	}
	if res, ok := n.firewallLocked(p); !ok {
		return res
	}
	m, isNew, drop := n.mapOutboundLocked(now, p)
	if m == nil {
		return drop
	}
	inside := p.srcEP()
	p.setSrc(netip.AddrPortFrom(n.cfg.Public, m.external))
	n.stats.Translated++
	if isNew {
		return Result{Reason: newMappingNote(p.proto, inside, p.srcEP())}
	}
	return Result{}
}

func newMappingNote(proto Proto, inside, external netip.AddrPort) string {
	if proto == ICMP {
		return fmt.Sprintf("icmp %s id %d → %s id %d (new mapping)", inside.Addr(), inside.Port(), external.Addr(), external.Port())
	}
	return fmt.Sprintf("%s %s → %s (new mapping)", proto, inside, external)
}

func (n *NAT) inboundLocked(now time.Time, p *packet) Result {
	if p.proto == ICMP && !p.isEcho() {
		return n.inboundICMPErrorLocked(now, p)
	}
	if p.proto == ICMP && p.icmpType != icmpEchoReply {
		return n.dropLocked(dropUnsupported, fmt.Sprintf("unsupported: inbound %s (answering pings to the public address is the router's job)", p.String()))
	}
	if p.dst != n.cfg.Public {
		return n.dropLocked(dropNoMapping, fmt.Sprintf("dropped: %s is not addressed to the public address %s", p.String(), n.cfg.Public))
	}
	m := n.lookupInboundLocked(now, n.tableLocked(p.proto), p.dport)
	if res, ok := n.admitLocked(m, p, remoteEP(p, false)); !ok {
		return res
	}
	n.noteInboundLocked(now, m, p.tcpFlags)
	p.setDst(m.key.inside)
	n.stats.Translated++
	return Result{}
}

// admitLocked applies the filtering behavior to an inbound packet from
// remote addressed to mapping m (nil if there is none).
func (n *NAT) admitLocked(m *mapping, p *packet, remote netip.AddrPort) (Result, bool) {
	if m == nil {
		return n.dropLocked(dropNoMapping, fmt.Sprintf("dropped by %s filtering: no mapping for %s", n.cfg.Filtering, p.String())), false
	}
	if n.permits(m, remote) {
		return Result{}, true
	}
	from := remote.String()
	if n.cfg.Filtering == AddressDependent || p.proto == ICMP {
		from = remote.Addr().String()
	}
	return n.dropLocked(dropFiltered, fmt.Sprintf("dropped by %s filtering: %s has not sent to %s (%s)",
		n.cfg.Filtering, m.key.inside, from, p.String())), false
}

// hairpinLocked handles a packet from inside to the public address (RFC
// 4787 section 6): it goes out through the sender's mapping, so the
// receiver sees the sender's external endpoint (REQ-9), and comes back in
// through the receiver's mapping, filtered like any inbound packet.
func (n *NAT) hairpinLocked(now time.Time, p *packet) Result {
	if !n.cfg.Hairpin {
		return n.dropLocked(dropHairpinDisabled, fmt.Sprintf("hairpinning disabled: %s", p.String()))
	}
	if p.proto == ICMP {
		return n.dropLocked(dropUnsupported, fmt.Sprintf("unsupported: hairpinned %s", p.String()))
	}
	if res, ok := n.firewallLocked(p); !ok {
		return res
	}
	src, isNew, drop := n.mapOutboundLocked(now, p)
	if src == nil {
		return drop
	}
	inside := p.srcEP()
	external := netip.AddrPortFrom(n.cfg.Public, src.external)
	dst := n.lookupInboundLocked(now, n.tableLocked(p.proto), p.dport)
	if res, ok := n.admitLocked(dst, p, external); !ok {
		return res
	}
	n.noteInboundLocked(now, dst, p.tcpFlags)
	p.setSrc(external)
	p.setDst(dst.key.inside)
	n.stats.Translated++
	n.stats.Hairpinned++
	if isNew {
		return Result{Hairpin: true, Reason: newMappingNote(p.proto, inside, external) + " hairpinned"}
	}
	return Result{Hairpin: true}
}
