package nat

import (
	"fmt"
	"net/netip"
	"time"
)

// sweepInterval is how much lab time may pass between full scans for expired
// mappings. Lookups expire mappings lazily, so the sweep only bounds the
// memory held by mappings nobody touches again.
const sweepInterval = time.Second

// flowKey finds the mapping for an outbound packet: the internal endpoint
// plus the part of the destination the mapping behavior depends on.
type flowKey struct {
	inside netip.AddrPort
	remote netip.AddrPort // zero (EIM), ip:0 (ADM) or ip:port (APDM)
}

// mapping is one translation: an internal endpoint bound to an external
// port of the NAT's public address. The external port is never shared
// between mappings of one protocol (RFC 4787 REQ-3 forbids port
// overloading), so inbound lookup needs only the port.
type mapping struct {
	proto    Proto
	key      flowKey
	external uint16
	// peers are the remotes the internal endpoint has sent to through this
	// mapping, reduced to what the filtering behavior compares: ip:0 for
	// address-dependent filtering, ip:port otherwise.
	peers   map[netip.AddrPort]struct{}
	created time.Time
	last    time.Time // last refresh
	tcp     tcpState
}

// table holds one protocol's mappings.
type table struct {
	byKey map[flowKey]*mapping
	byExt map[uint16]*mapping
	next  uint32 // sequential allocation cursor; 0 means PortMin
}

func newTable() table {
	return table{byKey: make(map[flowKey]*mapping), byExt: make(map[uint16]*mapping)}
}

// tableLocked returns the table for a packet protocol (never Any).
func (n *NAT) tableLocked(p Proto) *table { return &n.tables[p-TCP] }

// timeout returns how long m lives without a refresh.
func (n *NAT) timeout(m *mapping) time.Duration {
	switch m.proto {
	case TCP:
		if m.tcp.established() {
			return n.cfg.TCPEstablishedTimeout
		}
		return n.cfg.TCPTransitoryTimeout
	case UDP:
		return n.cfg.UDPTimeout
	default:
		return n.cfg.ICMPTimeout
	}
}

// alive reports whether m has not yet timed out at now: a mapping lives
// while now < last refresh + timeout.
func (n *NAT) alive(m *mapping, now time.Time) bool {
	return now.Before(m.last.Add(n.timeout(m)))
}

// mapKey reduces a destination to what the mapping behavior depends on.
func (n *NAT) mapKey(remote netip.AddrPort) netip.AddrPort {
	switch n.cfg.Mapping {
	case AddressDependent:
		return netip.AddrPortFrom(remote.Addr(), 0)
	case AddressAndPortDependent:
		return remote
	default:
		return netip.AddrPort{}
	}
}

// filterKey reduces a remote endpoint to what the filtering behavior
// compares.
func (n *NAT) filterKey(remote netip.AddrPort) netip.AddrPort {
	if n.cfg.Filtering == AddressDependent {
		return netip.AddrPortFrom(remote.Addr(), 0)
	}
	return remote
}

// permits reports whether the filter lets remote send in through m.
func (n *NAT) permits(m *mapping, remote netip.AddrPort) bool {
	if n.cfg.Filtering == EndpointIndependent {
		return true
	}
	_, ok := m.peers[n.filterKey(remote)]
	return ok
}

// noteOutboundLocked records that m carried a packet to remote: the filter
// admits remote from now on, TCP state advances, the mapping is refreshed.
func (n *NAT) noteOutboundLocked(now time.Time, m *mapping, remote netip.AddrPort, tcpFlags uint8) {
	k := n.filterKey(remote)
	if _, ok := m.peers[k]; !ok {
		m.peers[k] = struct{}{}
	}
	if m.proto == TCP {
		m.tcp.update(tcpFlags, true)
	}
	m.last = now
}

// noteInboundLocked records that m carried a permitted inbound packet.
func (n *NAT) noteInboundLocked(now time.Time, m *mapping, tcpFlags uint8) {
	if m.proto == TCP {
		m.tcp.update(tcpFlags, false)
	}
	if n.cfg.Refresh == RefreshBoth {
		m.last = now
	}
}

// lookupOutboundLocked returns the live mapping for an outbound flow, or nil.
func (n *NAT) lookupOutboundLocked(now time.Time, t *table, k flowKey) *mapping {
	m := t.byKey[k]
	if m != nil && !n.alive(m, now) {
		n.expireLocked(t, m)
		return nil
	}
	return m
}

// lookupInboundLocked returns the live mapping holding external port ext, or
// nil.
func (n *NAT) lookupInboundLocked(now time.Time, t *table, ext uint16) *mapping {
	m := t.byExt[ext]
	if m != nil && !n.alive(m, now) {
		n.expireLocked(t, m)
		return nil
	}
	return m
}

func (n *NAT) expireLocked(t *table, m *mapping) {
	n.removeLocked(t, m)
	n.stats.Expired++
}

func (n *NAT) removeLocked(t *table, m *mapping) {
	delete(t.byKey, m.key)
	delete(t.byExt, m.external)
	n.count--
}

// sweepLocked removes every expired mapping.
func (n *NAT) sweepLocked(now time.Time) {
	n.lastSweep = now
	for i := range n.tables {
		t := &n.tables[i]
		for _, m := range t.byExt {
			if !n.alive(m, now) {
				n.expireLocked(t, m)
			}
		}
	}
}

// createLocked makes a mapping for an outbound flow, or returns why it
// cannot.
func (n *NAT) createLocked(now time.Time, proto Proto, k flowKey) (*mapping, dropClass, string) {
	if n.cfg.MaxMappings > 0 && n.count >= n.cfg.MaxMappings {
		n.sweepLocked(now)
		if n.count >= n.cfg.MaxMappings {
			return nil, dropTableFull, fmt.Sprintf("mapping table full (%d mappings)", n.cfg.MaxMappings)
		}
	} else if now.Sub(n.lastSweep) >= sweepInterval || now.Before(n.lastSweep) {
		n.sweepLocked(now)
	}
	t := n.tableLocked(proto)
	ext, ok := n.allocLocked(now, t, k.inside.Port())
	if !ok {
		return nil, dropPortsExhausted, fmt.Sprintf("%s port range %d-%d exhausted", proto, n.cfg.PortMin, n.cfg.PortMax)
	}
	m := &mapping{
		proto:    proto,
		key:      k,
		external: ext,
		peers:    make(map[netip.AddrPort]struct{}, 1),
		created:  now,
		last:     now,
	}
	t.byKey[k] = m
	t.byExt[ext] = m
	n.count++
	n.stats.NewMappings++
	return m, dropNone, ""
}

// freeLocked reports whether external port p is free, reclaiming it from an
// expired mapping if need be.
func (n *NAT) freeLocked(now time.Time, t *table, p uint16) bool {
	m := t.byExt[p]
	if m == nil {
		return true
	}
	if n.alive(m, now) {
		return false
	}
	n.expireLocked(t, m)
	return true
}

// randomProbes is how many random ports Random allocation tries before it
// scans from a random start; with the table under ~90% full one of them
// almost always hits.
const randomProbes = 16

// allocLocked picks a free external port for an internal endpoint whose own
// port is want.
func (n *NAT) allocLocked(now time.Time, t *table, want uint16) (uint16, bool) {
	lo, hi := uint32(n.cfg.PortMin), uint32(n.cfg.PortMax)
	size := hi - lo + 1
	var start uint32
	switch n.cfg.PortAllocation {
	case Preserve:
		// Preserving only a free port never overloads one (RFC 4787
		// REQ-3): a second host wanting the same port falls back.
		if uint32(want) >= lo && uint32(want) <= hi && n.freeLocked(now, t, want) {
			return want, true
		}
		start = t.next
	case Sequential:
		start = t.next
	case Random:
		for range randomProbes {
			p := uint16(lo + n.rng.Uint32N(size))
			if n.freeLocked(now, t, p) {
				return p, true
			}
		}
		start = lo + n.rng.Uint32N(size)
	}
	if start < lo || start > hi {
		start = lo
	}
	for i := range size {
		p := lo + (start-lo+i)%size
		if n.freeLocked(now, t, uint16(p)) {
			t.next = p + 1
			return uint16(p), true
		}
	}
	return 0, false
}

// tcpState tracks a TCP mapping's connection (RFC 5382 section 5): which
// SYNs and FINs each direction has sent, and whether an RST was seen. It is
// kept per mapping, not per connection: with endpoint-independent mapping
// every connection from one internal endpoint shares it.
type tcpState uint8

const (
	tcpSynOut tcpState = 1 << iota
	tcpSynIn
	tcpFinOut
	tcpFinIn
	tcpReset
)

// update advances the state by a packet's flags; out is true for packets
// from inside.
func (s *tcpState) update(flags uint8, out bool) {
	if flags&tcpRST != 0 {
		*s |= tcpReset
		return
	}
	if flags&tcpSYN != 0 {
		if s.closed() {
			*s = 0 // a new connection reuses the mapping
		}
		if out {
			*s |= tcpSynOut
		} else {
			*s |= tcpSynIn
		}
	}
	if flags&tcpFIN != 0 {
		if out {
			*s |= tcpFinOut
		} else {
			*s |= tcpFinIn
		}
	}
}

// established reports SYNs seen both ways (a SYN-ACK counts) and no close.
func (s tcpState) established() bool {
	return s&(tcpSynOut|tcpSynIn) == tcpSynOut|tcpSynIn && !s.closed()
}

// closed reports an RST, or FINs both ways.
func (s tcpState) closed() bool {
	return s&tcpReset != 0 || s&(tcpFinOut|tcpFinIn) == tcpFinOut|tcpFinIn
}

// String names the state: "syn-sent", "syn-received", "established",
// "fin-wait", "closed" or "reset".
func (s tcpState) String() string {
	switch {
	case s&tcpReset != 0:
		return "reset"
	case s.closed():
		return "closed"
	case s.established() && s&(tcpFinOut|tcpFinIn) != 0:
		return "fin-wait"
	case s.established():
		return "established"
	case s&tcpSynIn != 0:
		return "syn-received"
	default:
		return "syn-sent"
	}
}
