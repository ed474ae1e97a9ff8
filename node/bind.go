package node

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.zx2c4.com/wireguard/conn"

	"github.com/latticelab/lattice/key"
)

// RelaySender sends a WireGuard packet to a peer through the relay.
type RelaySender interface {
	Send(dst key.Public, pkt []byte) error
}

// Bind is the node's wireguard-go conn.Bind. Each peer's endpoint is the
// peer itself, not an address: Send looks up the peer's current path,
// direct (the nominated ICE pair, written through the shared mux socket)
// or relay, so switching paths never touches WireGuard's state. Received
// packets map back to the peer whichever path they came on; other
// packets from unknown addresses are counted and dropped. The
// workarounds for WireGuard's timing that ride on the Bind (resends,
// crossing initiations, receiver-index routing, stale sessions) are in
// handshake.go.
type Bind struct {
	mux *Mux

	mu     sync.RWMutex
	peers  map[key.Public]*Path
	byAddr map[netip.AddrPort]*Path
	relay  RelaySender
	sessions

	relayIn   chan relayed
	open      chan struct{} // closed by Close; replaced by Open
	isOpen    bool
	unknown   atomic.Uint64
	relayDrop atomic.Uint64
	// unanswered, if set, is told of a handshake initiation sent
	// through the relay and unanswered (SetRelayUnanswered).
	unanswered atomic.Pointer[func()]
	// batch is what BatchSize returns; set before Open.
	batch int
	// gate keeps WireGuard's answer to a peer's initiation apart from a
	// handshake our own packets open (answer.go).
	gate answerGate
	// self is our key once SetSelf names it: a path made from then on
	// leads (Path.SetLeads) from the start if our key is the lower.
	self atomic.Pointer[key.Public]
	// owed are removed paths' answers WireGuard still owed (Path.initDue,
	// Unix ns) by key, guarded by mu: a path made again for the key
	// within initHold takes its due over (see RemovePeer).
	owed map[key.Public]int64
}

type relayed struct {
	path *Path
	buf  *[]byte
	n    int
}

var _ conn.Bind = (*Bind)(nil)

// NewBind returns a Bind over mux.
func NewBind(mux *Mux) *Bind {
	return &Bind{
		mux:      mux,
		peers:    map[key.Public]*Path{},
		byAddr:   map[netip.AddrPort]*Path{},
		sessions: sessions{byIndex: map[uint32]*Path{}},
		relayIn:  make(chan relayed, muxQueueLen),
		batch:    bindBatchSize,
	}
}

// Peer returns the path for peer key pk, creating it.
func (b *Bind) Peer(pk key.Public) *Path { return b.peer(pk, false) }

// peer is Peer; a path it makes is pending (Path.pending) if pending.
func (b *Bind) peer(pk key.Public, pending bool) *Path {
	b.mu.RLock()
	p := b.peers[pk]
	b.mu.RUnlock()
	if p != nil {
		return p
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p = b.peers[pk]; p == nil {
		p = &Path{Key: pk}
		p.pending.Store(pending)
		if self := b.self.Load(); self != nil {
			p.leads.Store(leads(*self, pk))
		}
		if due, ok := b.owed[pk]; ok {
			delete(b.owed, pk)
			if due > time.Now().UnixNano() {
				p.initDue.Store(due)
			}
		}
		b.peers[pk] = p
	}
	return p
}

// SetSelf names our key: a path the Bind makes from now on leads when our
// key is the lower, as the node's peer later says (Path.SetLeads). Adding
// a peer to WireGuard makes its path (ParseEndpoint), and with a
// keepalive WireGuard opens a handshake at once, before the node's peer
// exists: the peer's initiation crossing that one must meet a path that
// already knows which side wins.
func (b *Bind) SetSelf(pub key.Public) { b.self.Store(&pub) }

// Ready says the node's peer holds p, and WireGuard has started it: what
// comes from it is passed on (see Path.pending).
func (b *Bind) Ready(p *Path) { p.pending.Store(false) }

// RemovePeer forgets a peer. If WireGuard still owed it an answer
// (Path.initDue), a path made again for its key within initHold owes it
// too: WireGuard reads a queued initiation by the key inside, so the
// peer added again (a peer gone offline and back, as a restart's goodbye
// and registration arrive together) answers it, and our initiation made
// meanwhile must be withheld as on the old path.
func (b *Bind) RemovePeer(pk key.Public) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.peers[pk]; p != nil {
		if b.byAddr[p.lastAddr] == p {
			delete(b.byAddr, p.lastAddr)
		}
		p.stopResends()
		b.forgetIndicesLocked(p)
		delete(b.peers, pk)
		p.removed.Store(true)
		if due := p.initDue.Load(); due > time.Now().UnixNano() {
			b.oweLocked(pk, due)
		}
	}
}

// current is the path for p's key now: p, unless RemovePeer forgot it
// and a path was made again for the key.
func (b *Bind) current(p *Path) *Path {
	if !p.removed.Load() {
		return p
	}
	b.mu.RLock()
	cur := b.peers[p.Key]
	b.mu.RUnlock()
	if cur == nil {
		return p
	}
	return cur
}

// oweLocked records due in b.owed, dropping entries past theirs once it
// holds many (each lasts initHold). Callers hold b.mu.
func (b *Bind) oweLocked(pk key.Public, due int64) {
	if len(b.owed) >= 64 {
		now := time.Now().UnixNano()
		for k, d := range b.owed {
			if d <= now {
				delete(b.owed, k)
			}
		}
	}
	if b.owed == nil {
		b.owed = map[key.Public]int64{}
	}
	if len(b.owed) < 1024 {
		b.owed[pk] = due
	}
}

// SetDirect switches a peer to the direct path at addr; an invalid addr
// switches it to the relay. Packets still arriving from the last direct
// address are accepted until another direct address replaces it: the two
// sides notice a dead path at different moments, and WireGuard
// authenticates every packet anyway.
func (b *Bind) SetDirect(p *Path, addr netip.AddrPort) {
	if addr.IsValid() && b.strayFrom(addr) {
		p.stale(time.Now().UnixNano())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p.hedge.Store(false)
	if !addr.IsValid() {
		p.direct.Store(nil)
		return
	}
	if p.lastAddr.IsValid() && p.lastAddr != addr && b.byAddr[p.lastAddr] == p {
		delete(b.byAddr, p.lastAddr)
	}
	p.lastAddr = addr
	b.byAddr[addr] = p
	p.lastDirectRx.Store(0)
	p.direct.Store(&addr)
}

// SetRelay sets the relay client packets without a direct path go to.
func (b *Bind) SetRelay(r RelaySender) {
	b.mu.Lock()
	b.relay = r
	b.mu.Unlock()
}

// DeliverRelayed hands WireGuard a packet the relay received from src. It
// copies pkt. Packets from unknown peers are dropped.
func (b *Bind) DeliverRelayed(src key.Public, pkt []byte) {
	if len(pkt) > muxBufSize || Classify(pkt) != KindWireGuard {
		b.unknown.Add(1)
		return
	}
	now := time.Now().UnixNano()
	b.mu.RLock()
	p := b.peers[src]
	var drop, crossed, stale, held bool
	if p != nil {
		drop, crossed, stale, held = b.checkLocked(p, pkt, now)
	}
	b.mu.RUnlock()
	if held {
		b.gate.settle()
	}
	if p == nil {
		b.unknown.Add(1)
		return
	}
	if stale {
		p.stale(now)
	}
	if crossed {
		// The peer is there (it sent its initiation): ours, which it
		// would have answered instead, may never have reached it.
		b.kick(p)
	}
	if drop {
		return
	}
	if isData(pkt) {
		p.relayRx.Store(time.Now().UnixNano()) // liveness.go
	}
	p.restoreWG() // before WireGuard sees a trimmed peer's packet
	bp := muxPool.Get().(*[]byte)
	n := copy(*bp, pkt)
	select {
	case b.relayIn <- relayed{path: p, buf: bp, n: n}:
	default:
		b.relayDrop.Add(1)
		muxPool.Put(bp)
	}
}

// Unknown counts packets dropped because no peer matched their source.
func (b *Bind) Unknown() uint64 { return b.unknown.Load() }

// Open implements conn.Bind. The port is the mux's; WireGuard does not
// choose it.
func (b *Bind) Open(uint16) ([]conn.ReceiveFunc, uint16, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isOpen {
		return nil, 0, conn.ErrBindAlreadyOpen
	}
	b.isOpen = true
	stop := make(chan struct{})
	b.open = stop
	var port uint16
	if u, ok := b.mux.LocalAddr().(*net.UDPAddr); ok {
		port = uint16(u.Port)
	}
	return []conn.ReceiveFunc{b.receiveDirect(stop), b.receiveRelayed(stop)}, port, nil
}

func (b *Bind) receiveDirect(stop chan struct{}) conn.ReceiveFunc {
	from := make([]netip.AddrPort, conn.IdealBatchSize)
	var stale, trimmed, crossed, inits []*Path
	return func(bufs [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
		for {
			n, err := b.mux.ReadWireGuard(stop, bufs, sizes, from[:min(len(bufs), len(from))])
			if err != nil {
				return 0, err
			}
			out, held := 0, false
			now := time.Now().UnixNano()
			stale, trimmed, crossed, inits = stale[:0], trimmed[:0], crossed[:0], inits[:0]
			b.mu.RLock()
			for i := range n {
				pkt := bufs[i][:sizes[i]]
				p := b.byAddr[from[i]]
				if p == nil {
					// Not the direct path's liveness: ICE has not chosen
					// this address.
					if p = b.matchIndexLocked(pkt, from[i], now); p == nil {
						b.unknown.Add(1)
						continue
					}
				} else {
					drop, isCrossed, isStale, isHeld := b.checkLocked(p, pkt, now)
					held = held || isHeld
					if isCrossed {
						crossed = append(crossed, p)
					}
					if drop {
						continue
					}
					p.lastDirectRx.Store(now)
					if isStale {
						stale = append(stale, p)
					}
				}
				p.RxDirect.Add(uint64(sizes[i]))
				b.noteReceived(p, pkt)
				if isInitiation(pkt) {
					inits = append(inits, p)
				}
				if p.restore.Load() != nil {
					trimmed = append(trimmed, p)
				}
				if out != i {
					// wireguard-go reads its own arrays by index, so the
					// packet must move, not the slice header.
					sizes[out] = copy(bufs[out], pkt)
				}
				eps[out] = &Endpoint{Path: p}
				out++
			}
			b.mu.RUnlock()
			for _, p := range stale {
				p.stale(now)
			}
			for _, p := range crossed {
				b.kick(p) // as in DeliverRelayed
			}
			// Trimmed peers go back into WireGuard before it reads
			// their packets (restoreWG takes WireGuard's locks, which
			// must not nest in b.mu: adding a peer parses its endpoint).
			for _, p := range trimmed {
				p.restoreWG()
			}
			if held {
				b.gate.settle()
			}
			if len(inits) > 0 {
				// WireGuard reads them now: its answers are due from here.
				handed := time.Now().UnixNano()
				for _, p := range inits {
					p.owesAnswer(handed)
				}
			}
			if out > 0 {
				return out, nil
			}
		}
	}
}

func (b *Bind) receiveRelayed(stop chan struct{}) conn.ReceiveFunc {
	return func(bufs [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
		var r relayed
		select {
		case r = <-b.relayIn:
		case <-stop:
			return 0, net.ErrClosed
		}
		i := 0
		for {
			sizes[i] = copy(bufs[i], (*r.buf)[:r.n])
			muxPool.Put(r.buf)
			p := b.current(r.path) // made again since it was queued?
			p.RxRelay.Add(uint64(sizes[i]))
			b.noteReceived(p, bufs[i][:sizes[i]])
			if isInitiation(bufs[i][:sizes[i]]) {
				// WireGuard reads it now: its answer is due from here.
				p.owesAnswer(time.Now().UnixNano())
			}
			eps[i] = &Endpoint{Path: p}
			i++
			if i == len(bufs) {
				return i, nil
			}
			select {
			case r = <-b.relayIn:
			default:
				return i, nil
			}
		}
	}
}

// Close implements conn.Bind: the receive functions return; the mux stays
// open for ICE.
func (b *Bind) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isOpen {
		close(b.open)
		b.isOpen = false
	}
	return nil
}

// SetMark implements conn.Bind (no fwmark on a user-space socket).
func (b *Bind) SetMark(uint32) error { return nil }

// BatchSize implements conn.Bind. wireguard-go gives each receive
// function that many 64 KiB buffers for the device's life: at
// conn.IdealBatchSize (128) the Bind's two took 16 MiB per node, 90% of a
// 20-node lab's heap, for batches the mux (one datagram per read, no GSO)
// and the relay seldom fill. bindBatchSize keeps 2 MiB; BenchmarkPath
// showed no difference beyond the noise (2026-12-02, load 20: direct 0.22
// and 0.72 Gbit/s at 128, 0.50 and 0.51 at 16; relay 0.31, 0.45 and 0.34,
// 0.40). Config.Batch sets another.
func (b *Bind) BatchSize() int { return b.batch }

// bindBatchSize is the Bind's batch unless Config.Batch says otherwise.
const bindBatchSize = 16

// Send implements conn.Bind.
func (b *Bind) Send(bufs [][]byte, ep conn.Endpoint) error {
	e, ok := ep.(*Endpoint)
	if !ok {
		return fmt.Errorf("node: foreign endpoint %T", ep)
	}
	p := b.current(e.Path)
	if bufs = b.noteSent(p, bufs); len(bufs) == 0 {
		return nil
	}
	p.keepForReplay(bufs)
	return b.send(p, bufs)
}

func (b *Bind) send(p *Path, bufs [][]byte) error { return b.sendWatched(p, bufs, true) }

// sendWatched sends bufs to p; with watch, data sent directly arms the
// path's liveness watch (liveness.go). Packets sent again (replay) do not:
// the peer's WireGuard drops those it already has without an answer.
func (b *Bind) sendWatched(p *Path, bufs [][]byte, watch bool) error {
	if a, ok := p.Direct(); ok {
		err := b.mux.WriteBatch(bufs, a)
		if err == nil {
			if watch {
				p.noteDirectSent(bufs)
			}
			for _, buf := range bufs {
				p.TxDirect.Add(uint64(len(buf)))
			}
		}
		if !p.hedge.Load() {
			return err
		}
		// A direct path in doubt: the relay carries a copy (liveness.go).
		if rerr := b.sendRelay(p, bufs); rerr != nil {
			return errors.Join(err, rerr)
		}
		return nil
	}
	return b.sendRelay(p, bufs)
}

// sendRelay sends bufs to p through the relay.
func (b *Bind) sendRelay(p *Path, bufs [][]byte) error {
	b.mu.RLock()
	r := b.relay
	b.mu.RUnlock()
	if r == nil {
		return errors.New("node: no direct path and no relay")
	}
	for _, buf := range bufs {
		if err := r.Send(p.Key, buf); err != nil {
			return err
		}
		p.TxRelay.Add(uint64(len(buf)))
	}
	return nil
}

// endpointPrefix marks the endpoints the node writes into WireGuard's
// configuration: the peer's key, not an address.
const endpointPrefix = "lattice:"

// EndpointString is the endpoint= value naming a peer.
func EndpointString(pk key.Public) string {
	return endpointPrefix + base64.RawURLEncoding.EncodeToString(pk[:])
}

// ParseEndpoint implements conn.Bind.
func (b *Bind) ParseEndpoint(s string) (conn.Endpoint, error) {
	rest, ok := strings.CutPrefix(s, endpointPrefix)
	if !ok {
		return nil, fmt.Errorf("node: endpoint %q is not a lattice peer", s)
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(raw) != 32 {
		return nil, fmt.Errorf("node: endpoint %q: bad key", s)
	}
	// WireGuard parses a new peer's endpoint before it starts the peer:
	// a path made here waits for Ready.
	return &Endpoint{Path: b.peer(key.Public(raw), true)}, nil
}

// Endpoint is a peer as WireGuard sees it.
type Endpoint struct{ Path *Path }

var _ conn.Endpoint = (*Endpoint)(nil)

func (e *Endpoint) ClearSrc()           {}
func (e *Endpoint) SrcToString() string { return "" }
func (e *Endpoint) DstToString() string { return EndpointString(e.Path.Key) }
func (e *Endpoint) DstToBytes() []byte  { return e.Path.Key[:] }
func (e *Endpoint) SrcIP() netip.Addr   { return netip.Addr{} }

// DstIP is the direct address's IP, or invalid on the relay.
func (e *Endpoint) DstIP() netip.Addr {
	if a, ok := e.Path.Direct(); ok {
		return a.Addr()
	}
	return netip.Addr{}
}
