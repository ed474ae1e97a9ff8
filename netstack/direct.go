package netstack

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/ports"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Direct flows: an agent's TCP connections to overlay peers carried as
// packets between its link and the stack's WireGuard path, so that the
// agent's kernel TCP talks to the peer's TCP end to end (no gateway TCP,
// no splice, no second TCP in this stack). The agent shares the stack's
// address; each flow holds a port reservation in this stack's port
// manager for its overlay-side tuple, so it never collides with the
// stack's own connections, listeners (forwards) or another agent's flow.
// The agent's port is kept when it is free there and translated
// otherwise (NAT, RFC 4787's endpoint-dependent mapping: one mapping per
// destination).

// directKey names a TCP flow by its peer's address and port and a local
// port: the agent's (on the gateway's side) or the stack's (overlay side).
type directKey struct {
	peer     [4]byte
	peerPort uint16
	local    uint16
}

func (k directKey) peerAddrPort() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4(k.peer), k.peerPort)
}

// Flow state bits, set as packets pass.
const (
	flowEstablished uint32 = 1 << iota // the peer answered the SYN
	flowFinOut                         // the agent sent FIN
	flowFinIn                          // the peer sent FIN
	flowRST                            // either sent RST
)

// Timeouts of a direct flow after its last packet, by state (RFC 5382
// REQ-5 for established flows; Linux conntrack's SYN_SENT and TIME_WAIT,
// 2 minutes, for the transitory ones).
const (
	directIdleEstablished = 2*time.Hour + 4*time.Minute
	directIdleTransitory  = 2 * time.Minute
	directIdleReset       = 10 * time.Second
)

// directExpired reports whether a flow in state st, last seen at last, is
// over at now.
func directExpired(st uint32, last, now time.Time) bool {
	idle := now.Sub(last)
	switch {
	case st&flowRST != 0:
		return idle > directIdleReset
	case st&(flowFinOut|flowFinIn) == flowFinOut|flowFinIn, st&flowEstablished == 0:
		return idle > directIdleTransitory
	default:
		return idle > directIdleEstablished
	}
}

// tcpFlagState is the state bits a segment with TCP flags f sets, sent by
// the agent (out) or the peer.
func tcpFlagState(f header.TCPFlags, out bool) uint32 {
	var st uint32
	if f&header.TCPFlagRst != 0 {
		st |= flowRST
	}
	if f&header.TCPFlagFin != 0 {
		if out {
			st |= flowFinOut
		} else {
			st |= flowFinIn
		}
	}
	if !out && f&(header.TCPFlagSyn|header.TCPFlagAck) == header.TCPFlagSyn|header.TCPFlagAck {
		st |= flowEstablished
	}
	return st
}

// directSink takes the packets of its flows that came from the overlay.
type directSink interface {
	// toAgent writes each packet (an IPv4 TCP packet of flows[i], in a
	// buffer it may modify and must not keep) to the agent. It is called
	// from WireGuard's receive goroutines, concurrently.
	toAgent(flows []*directFlow, pkts [][]byte)
}

// directFlow is one agent TCP flow carried as packets.
type directFlow struct {
	agent directKey // the agent's side: peer, peer port, agent's port
	local uint16    // the stack's port for it (the overlay side)
	sink  directSink
	res   ports.Reservation
	state atomic.Uint32
	last  atomic.Int64 // unix nanoseconds of the last packet either way
}

func (f *directFlow) touch(st uint32, now int64) {
	if st != 0 && f.state.Load()&st != st {
		f.state.Or(st)
	}
	f.last.Store(now)
}

func (f *directFlow) expired(now time.Time) bool {
	return directExpired(f.state.Load(), time.Unix(0, f.last.Load()), now)
}

// directTable holds a stack's direct flows by their overlay-side key, for
// the TUNAdapter to divert their packets from WireGuard before gVisor.
type directTable struct {
	stack *stack.Stack
	addr  tcpip.Address // the stack's IPv4 address; flows are IPv4
	count atomic.Int32  // len(flows), read without the lock

	mu    sync.RWMutex // guards the following field
	flows map[directKey]*directFlow
}

func newDirectTable(s *stack.Stack, addr netip.Addr) *directTable {
	t := &directTable{stack: s, flows: map[directKey]*directFlow{}}
	if addr.Is4() {
		t.addr = tcpip.AddrFrom4(addr.As4())
	}
	return t
}

// add reserves an overlay-side port for f (its agent port if free, else
// an ephemeral one) and enters it.
func (t *directTable) add(f *directFlow) error {
	if t.addr.Len() == 0 {
		return fmt.Errorf("netstack: direct flow: the stack has no IPv4 address")
	}
	res := ports.Reservation{
		Networks:  []tcpip.NetworkProtocolNumber{header.IPv4ProtocolNumber},
		Transport: header.TCPProtocolNumber,
		Addr:      t.addr,
		Port:      f.agent.local,
		Dest:      tcpip.FullAddress{Addr: tcpip.AddrFrom4(f.agent.peer), Port: f.agent.peerPort},
	}
	port, err := t.stack.ReservePort(t.stack.SecureRNG(), res, nil)
	if err != nil {
		res.Port = 0
		if port, err = t.stack.ReservePort(t.stack.SecureRNG(), res, nil); err != nil {
			return fmt.Errorf("netstack: direct flow to %v: no local port: %s", f.agent.peerAddrPort(), err)
		}
	}
	res.Port = port
	f.local, f.res = port, res
	key := directKey{peer: f.agent.peer, peerPort: f.agent.peerPort, local: port}
	t.mu.Lock()
	t.flows[key] = f
	t.count.Store(int32(len(t.flows)))
	t.mu.Unlock()
	return nil
}

// remove takes f out and releases its port.
func (t *directTable) remove(f *directFlow) {
	key := directKey{peer: f.agent.peer, peerPort: f.agent.peerPort, local: f.local}
	t.mu.Lock()
	if t.flows[key] != f {
		t.mu.Unlock()
		return
	}
	delete(t.flows, key)
	t.count.Store(int32(len(t.flows)))
	t.mu.Unlock()
	t.stack.ReleasePort(f.res)
}

// lookup returns the flow an IPv4 packet from the overlay (validated by
// ipPacket) belongs to, or nil: a TCP segment of the flow, or an ICMP
// error quoting one of its segments (a peer offline, RFC 1122 section
// 4.2.3.9: the agent's connect fails at once).
func (t *directTable) lookup(p []byte) *directFlow {
	if t == nil || t.count.Load() == 0 {
		return nil
	}
	ip := header.IPv4(p)
	ihl := int(ip.HeaderLength())
	if ip.More() || ip.FragmentOffset() != 0 || ip.DestinationAddress() != t.addr {
		return nil
	}
	var key directKey
	switch ip.Protocol() {
	case uint8(header.TCPProtocolNumber):
		if len(p) < ihl+header.TCPMinimumSize {
			return nil
		}
		copy(key.peer[:], p[12:16])
		key.peerPort = binary.BigEndian.Uint16(p[ihl:])
		key.local = binary.BigEndian.Uint16(p[ihl+2:])
	case uint8(header.ICMPv4ProtocolNumber):
		q, ok := icmpQuotedTCP(p[ihl:])
		if !ok || header.IPv4(q).SourceAddress() != t.addr {
			return nil
		}
		copy(key.peer[:], q[16:20])
		qihl := int(header.IPv4(q).HeaderLength())
		key.local = binary.BigEndian.Uint16(q[qihl:])
		key.peerPort = binary.BigEndian.Uint16(q[qihl+2:])
	default:
		return nil
	}
	t.mu.RLock()
	f := t.flows[key]
	t.mu.RUnlock()
	return f
}

// icmpQuotedTCP returns the packet an ICMPv4 destination unreachable or
// time exceeded message quotes, if it is IPv4 TCP with at least its ports
// (RFC 792: the header and 8 bytes of data).
func icmpQuotedTCP(icmp []byte) ([]byte, bool) {
	if len(icmp) < header.ICMPv4MinimumSize {
		return nil, false
	}
	if t := header.ICMPv4(icmp).Type(); t != header.ICMPv4DstUnreachable && t != header.ICMPv4TimeExceeded {
		return nil, false
	}
	q := icmp[header.ICMPv4MinimumSize:]
	if len(q) < header.IPv4MinimumSize || header.IPVersion(q) != header.IPv4Version {
		return nil, false
	}
	qihl := int(header.IPv4(q).HeaderLength())
	if qihl < header.IPv4MinimumSize || len(q) < qihl+8 || header.IPv4(q).Protocol() != uint8(header.TCPProtocolNumber) {
		return nil, false
	}
	return q, true
}

// Len reports how many direct flows the table holds.
func (t *directTable) Len() int { return int(t.count.Load()) }

// flush hands the packets a Write diverted to their flows' sinks, a run
// of one sink (one agent) at a time, and empties s.
func (s *divertScratch) flush() {
	fl, ps := s.flows, s.pkts
	for i := 0; i < len(fl); {
		j := i + 1
		for j < len(fl) && fl[j].sink == fl[i].sink {
			j++
		}
		fl[i].sink.toAgent(fl[i:j], ps[i:j])
		i = j
	}
	s.reset()
}

// divertScratch is a Write's room for the packets it diverts.
type divertScratch struct {
	flows []*directFlow
	pkts  [][]byte
}

func (s *divertScratch) reset() {
	clear(s.flows)
	clear(s.pkts)
	s.flows, s.pkts = s.flows[:0], s.pkts[:0]
}
