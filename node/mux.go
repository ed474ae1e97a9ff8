package node

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	netipv4 "golang.org/x/net/ipv4"

	"github.com/latticelab/lattice/internal/deadline"
)

// PacketKind is what the mux decided a datagram is.
type PacketKind int

// Packet kinds.
const (
	KindOther PacketKind = iota
	KindSTUN
	KindWireGuard
)

// Classify tells STUN from WireGuard by their headers alone.
//
// STUN (RFC 8489 §5): the two top bits of the first byte are zero, bytes
// 4-7 are the magic cookie 0x2112A442, and the length field plus the
// 20-byte header is the datagram's size, a multiple of 4.
//
// WireGuard: a message type 1-4 followed by three zero bytes, with the
// exact size of a handshake initiation (148), response (92) or cookie
// reply (64), or a transport message of at least 32 bytes (header and
// tag; padding does not make every length a multiple of 16, see below).
func Classify(b []byte) PacketKind {
	n := len(b)
	if n >= 20 && b[0]&0xc0 == 0 && binary.BigEndian.Uint32(b[4:8]) == 0x2112a442 &&
		int(binary.BigEndian.Uint16(b[2:4]))+20 == n && n%4 == 0 {
		return KindSTUN
	}
	if n >= 4 && b[1] == 0 && b[2] == 0 && b[3] == 0 {
		switch b[0] {
		case 1:
			if n == initiationSize {
				return KindWireGuard
			}
		case 2:
			if n == responseSize {
				return KindWireGuard
			}
		case 3:
			if n == cookieSize {
				return KindWireGuard
			}
		case 4:
			// Header and tag are 32 bytes. The padding makes the rest a
			// multiple of 16 only below the MTU: wireguard-go caps padded
			// packets at the MTU (1420 is not a multiple of 16), so a
			// full-size packet's message is 1452 bytes.
			if n >= transportMin {
				return KindWireGuard
			}
		}
	}
	return KindOther
}

// WireGuard message shapes (type byte and length), for the Bind. They
// assume Classify said KindWireGuard or check as much as they need.
const (
	initiationSize = 148
	responseSize   = 92
	cookieSize     = 64
	transportMin   = 32 // header and tag
)

func isInitiation(b []byte) bool { return len(b) == initiationSize && b[0] == 1 }
func isResponse(b []byte) bool   { return len(b) == responseSize && b[0] == 2 }
func isTransport(b []byte) bool  { return len(b) >= transportMin && b[0] == 4 }

// MuxStats counts what the mux saw.
type MuxStats struct {
	// Datagrams received, by kind.
	STUN      uint64 `json:"stun_datagrams"`
	WireGuard uint64 `json:"wireguard_datagrams"`
	Other     uint64 `json:"other_datagrams"`
	// Datagrams dropped because their queue was full.
	STUNDropped      uint64 `json:"stun_dropped"`
	WireGuardDropped uint64 `json:"wireguard_dropped"`
}

// datagram is a received packet with its source.
type datagram struct {
	buf  *[]byte
	n    int
	from netip.AddrPort
}

const (
	muxBufSize   = 2048
	muxQueueLen  = 1024
	muxSTUNQueue = 256
	// muxWaitWG is how long the read loop of a socket that is not the
	// kernel's waits for room in the WireGuard queue before it drops
	// (see queueWG).
	muxWaitWG = 250 * time.Millisecond
)

var muxPool = sync.Pool{New: func() any { b := make([]byte, muxBufSize); return &b }}

// Mux shares one UDP socket between ICE and WireGuard, as NetBird's
// ICEBind does: its read loop sends STUN to the ICE agents' UDPMux (so
// their server-reflexive candidates are this socket's mapping) and
// WireGuard to the Bind; everything else is counted and dropped. Both
// sides send through the same socket.
type Mux struct {
	pc    net.PacketConn
	batch *udpBatch // nil where pc is not a real UDP socket
	log   *slog.Logger
	stun  *muxConn
	wg    chan datagram
	done  chan struct{}
	once  sync.Once
	loop  sync.WaitGroup

	stunN, wgN, other, stunDrop, wgDrop atomic.Uint64
	coalesced                           atomic.Uint64 // datagrams that arrived in a run (UDP GRO)

	// wait is how long queueWG waits for room: zero on a kernel socket.
	wait time.Duration
	// The read loop's own, for queueWG: its timer, and whether its last
	// wait for room ran out.
	waitTimer *time.Timer
	stalled   bool
}

// NewMux starts the read loop on pc. Close stops it and closes pc.
func NewMux(pc net.PacketConn, log *slog.Logger) *Mux { return newMux(pc, log, true) }

// newMux is NewMux; gro false leaves UDP GRO off (for tests of the read
// loop kernels without it run).
func newMux(pc net.PacketConn, log *slog.Logger, gro bool) *Mux {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Mux{pc: pc, batch: newUDPBatch(pc, gro), log: log, wg: make(chan datagram, muxQueueLen), done: make(chan struct{})}
	if _, kernel := pc.(*net.UDPConn); !kernel {
		m.wait = muxWaitWG
	}
	m.stun = &muxConn{m: m, in: make(chan datagram, muxSTUNQueue)}
	m.loop.Add(1)
	switch bc, ok := pc.(batchPacketConn); {
	case m.batch != nil && m.batch.gro:
		go m.readGROLoop()
	case m.batch != nil:
		go m.readBatchLoop()
	case ok:
		go m.readRunLoop(bc) // batchconn.go
	default:
		go m.readLoop()
	}
	return m
}

// readError says whether the read loop ends on err.
func (m *Mux) readError(err error) bool {
	select {
	case <-m.done:
		return true
	default:
	}
	if errors.Is(err, net.ErrClosed) {
		return true
	}
	m.log.Debug("mux read", "err", err)
	return false
}

func (m *Mux) readLoop() {
	defer m.loop.Done()
	for {
		bp := muxPool.Get().(*[]byte)
		n, addr, err := m.pc.ReadFrom(*bp)
		if err != nil {
			muxPool.Put(bp)
			if m.readError(err) {
				return
			}
			continue
		}
		m.route(datagram{buf: bp, n: n, from: addrPortOf(addr)})
	}
}

// readBatchLoop is readLoop on a real UDP socket: up to recvBatch
// datagrams per recvmmsg, each into its own pool buffer, which route
// takes over.
func (m *Mux) readBatchLoop() {
	defer m.loop.Done()
	msgs := make([]netipv4.Message, recvBatch)
	bps := make([]*[]byte, recvBatch)
	for i := range msgs {
		bps[i] = muxPool.Get().(*[]byte)
		msgs[i].Buffers = [][]byte{*bps[i]}
	}
	defer func() {
		for _, bp := range bps {
			muxPool.Put(bp)
		}
	}()
	m.readBatches(msgs, func(i int, msg *netipv4.Message) {
		m.route(datagram{buf: bps[i], n: msg.N, from: addrPortOf(msg.Addr)})
		bps[i] = muxPool.Get().(*[]byte)
		msg.Buffers[0] = *bps[i]
	})
}

// readBatches reads into msgs until the mux closes and calls each with
// every message that came from an address.
func (m *Mux) readBatches(msgs []netipv4.Message, each func(i int, msg *netipv4.Message)) {
	for {
		n, err := m.batch.pc.ReadBatch(msgs, 0)
		if err != nil {
			if m.readError(err) {
				return
			}
			continue
		}
		for i := range n {
			if msgs[i].Addr == nil {
				m.other.Add(1)
				continue
			}
			each(i, &msgs[i])
		}
	}
}

// readGROLoop is readBatchLoop on a socket with UDP GRO: each message
// may be a run of datagrams from one sender, read into one of the loop's
// own 64 KiB buffers and split here, each datagram copied into a pool
// buffer that route takes over. A copy in user space is cheaper than the
// kernel's split into a socket buffer per datagram and a recvmmsg slot
// each, and the queues keep holding datagrams of at most muxBufSize.
func (m *Mux) readGROLoop() {
	defer m.loop.Done()
	msgs := make([]netipv4.Message, groBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, groBufSize)}
		msgs[i].OOB = make([]byte, groOOBSize)
	}
	m.readBatches(msgs, func(_ int, msg *netipv4.Message) {
		if msg.N == 0 {
			m.other.Add(1)
			return
		}
		from := addrPortOf(msg.Addr)
		seg := groSegment(msg.OOB[:msg.NN])
		if seg > 0 && seg < msg.N {
			m.coalesced.Add(uint64((msg.N + seg - 1) / seg))
		}
		splitGRO(msg.Buffers[0][:msg.N], seg, func(b []byte) {
			if len(b) > muxBufSize {
				m.other.Add(1) // larger than any datagram the node sends
				return
			}
			bp := muxPool.Get().(*[]byte)
			m.route(datagram{buf: bp, n: copy(*bp, b), from: from})
		})
	})
}

// route hands d to ICE or WireGuard by its kind, or drops it; it owns d's
// buffer.
func (m *Mux) route(d datagram) {
	switch Classify((*d.buf)[:d.n]) {
	case KindSTUN:
		m.stunN.Add(1)
		select {
		case m.stun.in <- d:
		default:
			m.stunDrop.Add(1)
			muxPool.Put(d.buf)
		}
	case KindWireGuard:
		m.wgN.Add(1)
		m.queueWG(d)
	default:
		m.other.Add(1)
		muxPool.Put(d.buf)
	}
}

// queueWG hands d to the Bind's queue; it owns d's buffer. Only the read
// loop calls it.
//
// On a kernel socket a full queue drops d: the read loop must keep
// draining the socket so that STUN (ICE's checks and consent) is not stuck
// behind WireGuard, and the kernel's socket buffer would drop as well.
//
// On any other socket (a lab host's, in this process) the read loop waits
// for room instead, up to m.wait, and leaves what arrives meanwhile in the
// socket's own receive queue, which is bounded like SO_RCVBUF and drops
// when full. Dropping here would throw away what that queue could hold:
// at 20 ms RTT the 1,024 entries overflowed in TCP's bursts and cost 5% of
// a lab transfer's packets. A wait that runs out (nothing reading the
// Bind) drops, and so does every full queue after it until a datagram
// goes in without waiting, so STUN keeps flowing while the Bind is closed.
func (m *Mux) queueWG(d datagram) {
	select {
	case m.wg <- d:
		m.stalled = false
		return
	default:
	}
	if m.wait > 0 && !m.stalled {
		if m.waitTimer == nil {
			m.waitTimer = time.NewTimer(m.wait)
		} else {
			m.waitTimer.Reset(m.wait)
		}
		select {
		case m.wg <- d:
			m.waitTimer.Stop()
			return
		case <-m.waitTimer.C:
			m.stalled = true
		case <-m.done:
			m.waitTimer.Stop()
		}
	}
	m.wgDrop.Add(1)
	muxPool.Put(d.buf)
}

// addrPortOf is a's address and port, an IPv4-mapped address (what a
// dual-stack socket reports for IPv4 peers) unmapped: WireGuard endpoints,
// ICE and status compare and print plain IPv4.
func addrPortOf(a net.Addr) netip.AddrPort {
	if u, ok := a.(*net.UDPAddr); ok {
		return unmapAddrPort(u.AddrPort())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return unmapAddrPort(ap)
}

// STUNConn is the socket as ICE sees it: it reads only STUN and writes
// through the shared socket. Give it to pion's UDPMux.
func (m *Mux) STUNConn() net.PacketConn { return m.stun }

// ReadWireGuard fills bufs with received WireGuard datagrams, blocking
// for the first one until one arrives, cancel is closed or the mux closes;
// it returns how many it filled.
func (m *Mux) ReadWireGuard(cancel <-chan struct{}, bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	var d datagram
	select {
	case d = <-m.wg:
	case <-cancel:
		return 0, net.ErrClosed
	case <-m.done:
		return 0, net.ErrClosed
	}
	i := 0
	for {
		sizes[i] = copy(bufs[i], (*d.buf)[:d.n])
		from[i] = d.from
		muxPool.Put(d.buf)
		i++
		if i == len(bufs) {
			return i, nil
		}
		select {
		case d = <-m.wg:
		default:
			return i, nil
		}
	}
}

// WriteTo sends b to addr through the shared socket.
func (m *Mux) WriteTo(b []byte, addr netip.AddrPort) error {
	_, err := m.pc.WriteTo(b, net.UDPAddrFromAddrPort(addr))
	return err
}

// WriteBatch sends bufs, in order, to addr through the shared socket: in
// one or a few system calls on a real UDP socket (see udpBatch), one
// datagram per call elsewhere.
func (m *Mux) WriteBatch(bufs [][]byte, addr netip.AddrPort) error {
	if m.batch != nil {
		return m.batch.write(bufs, addr)
	}
	if bc, ok := m.pc.(batchPacketConn); ok {
		return bc.WriteBatchTo(bufs, addr)
	}
	ua := net.UDPAddrFromAddrPort(addr)
	for _, b := range bufs {
		if _, err := m.pc.WriteTo(b, ua); err != nil {
			return err
		}
	}
	return nil
}

// LocalAddr is the shared socket's address.
func (m *Mux) LocalAddr() net.Addr { return m.pc.LocalAddr() }

// Stats returns the mux's counters.
func (m *Mux) Stats() MuxStats {
	return MuxStats{STUN: m.stunN.Load(), WireGuard: m.wgN.Load(), Other: m.other.Load(),
		STUNDropped: m.stunDrop.Load(), WireGuardDropped: m.wgDrop.Load()}
}

// Close stops the read loop and closes the socket.
func (m *Mux) Close() error {
	var err error
	m.once.Do(func() {
		close(m.done)
		err = m.pc.Close()
		m.loop.Wait()
		// The read loop is gone: nothing refills the queues.
		for len(m.wg) > 0 {
			muxPool.Put((<-m.wg).buf)
		}
		for len(m.stun.in) > 0 {
			muxPool.Put((<-m.stun.in).buf)
		}
	})
	return err
}

// muxConn is the STUN side of the mux as a net.PacketConn.
type muxConn struct {
	m      *Mux
	in     chan datagram
	closed atomic.Bool
	rd     deadline.Deadline
}

func (c *muxConn) ReadFrom(b []byte) (int, net.Addr, error) {
	if c.closed.Load() {
		return 0, nil, net.ErrClosed
	}
	select {
	case d := <-c.in:
		n := copy(b, (*d.buf)[:d.n])
		muxPool.Put(d.buf)
		return n, net.UDPAddrFromAddrPort(d.from), nil
	case <-c.rd.Expired():
		return 0, nil, os.ErrDeadlineExceeded
	case <-c.m.done:
		return 0, nil, net.ErrClosed
	}
}

func (c *muxConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return c.m.pc.WriteTo(b, addr)
}

// Close detaches ICE; the shared socket stays open for WireGuard.
func (c *muxConn) Close() error {
	c.closed.Store(true)
	return nil
}

func (c *muxConn) LocalAddr() net.Addr { return c.m.pc.LocalAddr() }
func (c *muxConn) SetDeadline(t time.Time) error {
	c.rd.Set(t)
	return nil
}
func (c *muxConn) SetReadDeadline(t time.Time) error { c.rd.Set(t); return nil }
func (c *muxConn) SetWriteDeadline(time.Time) error  { return nil }
