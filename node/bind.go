package node

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.zx2c4.com/wireguard/conn"

	"github.com/latticelab/lattice/control"
)

// RelaySender sends a WireGuard packet to a peer through the relay.
type RelaySender interface {
	Send(dst control.Key, pkt []byte) error
}

// Bind is the node's wireguard-go conn.Bind. Each peer's endpoint is the
// peer itself, not an address: Send looks up the peer's current path,
// direct (the nominated ICE pair, written through the shared mux socket)
// or relay, so switching paths never touches WireGuard's state. Received
// packets map back to the peer whichever path they came on.
//
// A direct packet from an address that is no peer's direct path is
// matched by its receiver index instead: the index is one we chose in a
// handshake message we sent that peer (see noteIndex). This is how a
// restarted node hears the answer to its first handshake: the peer
// answers on its old direct path before the restarted node's ICE has
// chosen that address, and WireGuard refuses the resent initiation as a
// replay, so without it the handshake waits 5 s for WireGuard's retry.
// WireGuard authenticates every packet, so the index only routes. Other
// packets from unknown addresses are counted and dropped.
//
// The other way round, a transport message from a peer whose receiver
// index is none of ours means the peer still uses a session from before
// we restarted; the Bind tells the path's stale handler
// (Path.SetStaleHandler) so the node can open a handshake at once instead
// of waiting for its timers.
type Bind struct {
	mux *Mux

	mu      sync.RWMutex
	peers   map[control.Key]*Path
	byAddr  map[netip.AddrPort]*Path
	byIndex map[uint32]*Path // our handshake sender indices
	relay   RelaySender

	relayIn   chan relayed
	open      chan struct{} // closed by Close; replaced by Open
	isOpen    bool
	unknown   atomic.Uint64
	byIndexRx atomic.Uint64 // direct packets from unknown addresses, matched by index

	// strays are the sources of recent transport messages that matched no
	// path and no index of ours (Unix ns), at most maxStrays: a peer
	// still on a session from before our restart, whose address our ICE
	// has not chosen yet. SetDirect tells the path's stale handler when
	// ICE chooses one.
	strayMu   sync.Mutex
	strays    map[netip.AddrPort]int64
	staleRx   atomic.Uint64 // transport messages for a session we do not have
	relayDrop atomic.Uint64
	crossed   atomic.Uint64 // the peer's initiations dropped for ours (crossing)
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
		mux:     mux,
		peers:   map[control.Key]*Path{},
		byAddr:  map[netip.AddrPort]*Path{},
		byIndex: map[uint32]*Path{},
		relayIn: make(chan relayed, muxQueueLen),
	}
}

// Path is one peer's path state, shared by the Bind and the peer's path
// manager.
type Path struct {
	Key      control.Key
	direct   atomic.Pointer[netip.AddrPort] // nil: relay
	lastAddr netip.AddrPort                 // the last direct address, guarded by Bind.mu

	lastDirectRx                         atomic.Int64  // Unix ns of the last direct packet
	TxDirect, TxRelay, RxDirect, RxRelay atomic.Uint64 // bytes

	// Handshake resends: WireGuard retries a lost initiation only after 5
	// seconds, and the first one is often lost (the peer's relay
	// connection or NAT mapping is a moment behind its registration), so
	// the Bind resends it a few times quickly until a response arrives.
	hsMu       sync.Mutex
	hsInit     []byte
	hsSent     time.Time
	hsResponse bool
	hsTimer    *time.Timer
	hsTry      int

	// leads breaks ties between crossing handshakes (see crossing).
	leads atomic.Bool

	// indices are our latest handshake sender indices for this peer,
	// oldest first, guarded by Bind.mu. WireGuard keeps at most three
	// keypairs (previous, current, next), but every retried initiation
	// takes a new index, and it retries up to 18 times (90 s) while the
	// current keypair stays in use.
	indices []uint32
	// onStale and lastStale: see SetStaleHandler.
	onStale   atomic.Pointer[func()]
	lastStale atomic.Int64 // Unix ns
}

// SetStaleHandler sets the function told, at most once a second, that the
// peer sends transport messages for a session we do not have (it has not
// noticed our restart). It runs on a receive goroutine and must not block.
func (p *Path) SetStaleHandler(f func()) { p.onStale.Store(&f) }

// stale runs the stale handler, at most once a second.
func (p *Path) stale(now int64) {
	last := p.lastStale.Load()
	if now-last < int64(time.Second) || !p.lastStale.CompareAndSwap(last, now) {
		return
	}
	if f := p.onStale.Load(); f != nil && *f != nil {
		(*f)()
	}
}

// hasIndex reports whether idx is one of our sender indices for p, newest
// (the current session's) first. Callers hold Bind.mu.
func (p *Path) hasIndex(idx uint32) bool {
	for i := len(p.indices) - 1; i >= 0; i-- {
		if p.indices[i] == idx {
			return true
		}
	}
	return false
}

// maxIndices bounds Path.indices.
const maxIndices = 24

// SetLeads makes this side the one whose handshake wins when both open
// one at once. Exactly one side of a pair must lead: the node gives it to
// the side with the lower key, as ICE's controlling role.
func (p *Path) SetLeads(leads bool) { p.leads.Store(leads) }

// glareWindow bounds how long a leading side ignores the peer's
// initiations while its own is unanswered.
const glareWindow = 2 * time.Second

// crossing reports whether pkt is the peer's handshake initiation crossing
// ours on the way. Two crossing initiations cancel out: each side's
// answer to the other's replaces its own pending initiation in
// WireGuard, so neither handshake completes until WireGuard retries 5 s
// later (seen over the relay, whose round trip makes crossings likely).
// So the leading side drops the peer's initiation while its own is
// unanswered; the peer answers ours, and one handshake completes.
func (p *Path) crossing(pkt []byte) bool {
	if !isInitiation(pkt) || !p.leads.Load() {
		return false
	}
	p.hsMu.Lock()
	defer p.hsMu.Unlock()
	return p.hsInit != nil && !p.hsResponse && time.Since(p.hsSent) < glareWindow
}

// Direct returns the direct address in use, if any.
func (p *Path) Direct() (netip.AddrPort, bool) {
	if a := p.direct.Load(); a != nil {
		return *a, true
	}
	return netip.AddrPort{}, false
}

// LastDirectReceive is when the last packet arrived on the direct path.
func (p *Path) LastDirectReceive() time.Time {
	if ns := p.lastDirectRx.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Peer returns the path for key, creating it.
func (b *Bind) Peer(key control.Key) *Path {
	b.mu.RLock()
	p := b.peers[key]
	b.mu.RUnlock()
	if p != nil {
		return p
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p = b.peers[key]; p == nil {
		p = &Path{Key: key}
		b.peers[key] = p
	}
	return p
}

// RemovePeer forgets a peer.
func (b *Bind) RemovePeer(key control.Key) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.peers[key]; p != nil {
		if b.byAddr[p.lastAddr] == p {
			delete(b.byAddr, p.lastAddr)
		}
		p.stopResends()
		for _, i := range p.indices {
			if b.byIndex[i] == p {
				delete(b.byIndex, i)
			}
		}
		delete(b.peers, key)
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
func (b *Bind) DeliverRelayed(src control.Key, pkt []byte) {
	if len(pkt) > muxBufSize || Classify(pkt) != KindWireGuard {
		b.unknown.Add(1)
		return
	}
	b.mu.RLock()
	p := b.peers[src]
	stale := p != nil && b.staleSession(p, pkt)
	b.mu.RUnlock()
	if p == nil {
		b.unknown.Add(1)
		return
	}
	if stale {
		p.stale(time.Now().UnixNano())
	}
	if p.crossing(pkt) {
		b.crossed.Add(1)
		return
	}
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

// Stale counts transport messages for a session we do not have.
func (b *Bind) Stale() uint64 { return b.staleRx.Load() }

// maxStrays bounds Bind.strays; strayAge is how long one counts.
const (
	maxStrays = 64
	strayAge  = 5 * time.Second
)

// noteStray records the source of a transport message that matched
// nothing.
func (b *Bind) noteStray(from netip.AddrPort, now int64) {
	b.strayMu.Lock()
	defer b.strayMu.Unlock()
	if b.strays == nil || len(b.strays) >= maxStrays {
		b.strays = map[netip.AddrPort]int64{}
	}
	b.strays[from] = now
}

// strayFrom reports (and forgets) whether addr sent a stray transport
// message lately.
func (b *Bind) strayFrom(addr netip.AddrPort) bool {
	b.strayMu.Lock()
	defer b.strayMu.Unlock()
	t, ok := b.strays[addr]
	delete(b.strays, addr)
	return ok && time.Since(time.Unix(0, t)) < strayAge
}

// staleSession reports (and counts) whether pkt is a transport message for
// none of our sessions with p. Callers hold b.mu (read).
func (b *Bind) staleSession(p *Path, pkt []byte) bool {
	if !isTransport(pkt) || p.hasIndex(binary.LittleEndian.Uint32(pkt[4:8])) {
		return false
	}
	b.staleRx.Add(1)
	return true
}

// ByIndex counts direct packets from addresses that were no peer's path,
// accepted because their receiver index was one of ours (see Bind).
func (b *Bind) ByIndex() uint64 { return b.byIndexRx.Load() }

// Crossed counts the peers' handshake initiations dropped because ours
// was on its way (see Path.crossing).
func (b *Bind) Crossed() uint64 { return b.crossed.Load() }

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
	var stale []*Path
	return func(bufs [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
		for {
			n, err := b.mux.ReadWireGuard(stop, bufs, sizes, from[:min(len(bufs), len(from))])
			if err != nil {
				return 0, err
			}
			out := 0
			now := time.Now().UnixNano()
			stale = stale[:0]
			b.mu.RLock()
			for i := range n {
				p := b.byAddr[from[i]]
				if p == nil {
					// Not the direct path's liveness: ICE has not chosen
					// this address.
					if idx, ok := receiverIndex(bufs[i][:sizes[i]]); ok {
						p = b.byIndex[idx]
					}
					if p == nil {
						b.unknown.Add(1)
						if isTransport(bufs[i][:sizes[i]]) {
							b.noteStray(from[i], now)
						}
						continue
					}
					b.byIndexRx.Add(1)
				} else {
					if p.crossing(bufs[i][:sizes[i]]) {
						b.crossed.Add(1)
						continue
					}
					p.lastDirectRx.Store(now)
					if b.staleSession(p, bufs[i][:sizes[i]]) {
						stale = append(stale, p)
					}
				}
				p.RxDirect.Add(uint64(sizes[i]))
				if isResponse(bufs[i][:sizes[i]]) {
					b.noteResponse(p)
				}
				if out != i {
					// wireguard-go reads its own arrays by index, so the
					// packet must move, not the slice header.
					sizes[out] = copy(bufs[out], bufs[i][:sizes[i]])
				}
				eps[out] = &Endpoint{Path: p}
				out++
			}
			b.mu.RUnlock()
			for _, p := range stale {
				p.stale(now)
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
			r.path.RxRelay.Add(uint64(sizes[i]))
			if isResponse(bufs[i][:sizes[i]]) {
				b.noteResponse(r.path)
			}
			eps[i] = &Endpoint{Path: r.path}
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

// BatchSize implements conn.Bind.
func (b *Bind) BatchSize() int { return conn.IdealBatchSize }

// handshakeResends are the delays after an initiation at which it is
// sent again while no response came.
var handshakeResends = []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second}

func (b *Bind) noteInitiation(p *Path, pkt []byte) {
	p.hsMu.Lock()
	defer p.hsMu.Unlock()
	p.hsInit = append(p.hsInit[:0], pkt...)
	p.hsSent = time.Now()
	p.hsResponse = false
	p.hsTry = 0
	if p.hsTimer != nil {
		p.hsTimer.Stop()
	}
	p.hsTimer = time.AfterFunc(handshakeResends[0], func() { b.resendInitiation(p) })
}

func (b *Bind) resendInitiation(p *Path) {
	p.hsMu.Lock()
	if p.hsResponse || p.hsInit == nil {
		p.hsMu.Unlock()
		return
	}
	pkt := append([]byte(nil), p.hsInit...)
	p.hsTry++
	if p.hsTry < len(handshakeResends) {
		p.hsTimer = time.AfterFunc(handshakeResends[p.hsTry]-handshakeResends[p.hsTry-1], func() { b.resendInitiation(p) })
	}
	p.hsMu.Unlock()
	_ = b.send(p, [][]byte{pkt})
}

func (b *Bind) noteResponse(p *Path) {
	p.hsMu.Lock()
	p.hsResponse = true
	if p.hsTimer != nil {
		p.hsTimer.Stop()
		p.hsTimer = nil
	}
	p.hsMu.Unlock()
}

// stopResends cancels pending handshake resends (the peer is gone).
func (p *Path) stopResends() {
	p.hsMu.Lock()
	defer p.hsMu.Unlock()
	p.hsResponse = true
	if p.hsTimer != nil {
		p.hsTimer.Stop()
		p.hsTimer = nil
	}
}

// Send implements conn.Bind.
func (b *Bind) Send(bufs [][]byte, ep conn.Endpoint) error {
	e, ok := ep.(*Endpoint)
	if !ok {
		return fmt.Errorf("node: foreign endpoint %T", ep)
	}
	for _, buf := range bufs {
		switch {
		case isInitiation(buf):
			b.noteInitiation(e.Path, buf)
			b.noteIndex(e.Path, binary.LittleEndian.Uint32(buf[4:8]))
		case isResponse(buf):
			b.noteIndex(e.Path, binary.LittleEndian.Uint32(buf[4:8]))
		}
	}
	return b.send(e.Path, bufs)
}

// noteIndex records the sender index of a handshake message we send p:
// the peer's responses, cookie replies and transport messages carry it
// as their receiver index.
func (b *Bind) noteIndex(p *Path, idx uint32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byIndex[idx] == p {
		return
	}
	if len(p.indices) == maxIndices {
		if old := p.indices[0]; b.byIndex[old] == p {
			delete(b.byIndex, old)
		}
		p.indices = append(p.indices[:0], p.indices[1:]...)
	}
	p.indices = append(p.indices, idx)
	b.byIndex[idx] = p
}

// receiverIndex is the receiver index of a WireGuard response (92 bytes),
// cookie reply (64) or transport message; initiations carry none.
func receiverIndex(pkt []byte) (uint32, bool) {
	switch {
	case isResponse(pkt):
		return binary.LittleEndian.Uint32(pkt[8:12]), true
	case len(pkt) == cookieSize && pkt[0] == 3, isTransport(pkt):
		return binary.LittleEndian.Uint32(pkt[4:8]), true
	}
	return 0, false
}

func (b *Bind) send(p *Path, bufs [][]byte) error {
	if a, ok := p.Direct(); ok {
		for _, buf := range bufs {
			if err := b.mux.WriteTo(buf, a); err != nil {
				return err
			}
			p.TxDirect.Add(uint64(len(buf)))
		}
		return nil
	}
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
func EndpointString(key control.Key) string {
	return endpointPrefix + base64.RawURLEncoding.EncodeToString(key[:])
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
	return &Endpoint{Path: b.Peer(control.Key(raw))}, nil
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
