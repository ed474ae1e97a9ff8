package wgdev

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/net/ipv4"
	"golang.zx2c4.com/wireguard/conn"
)

// Bridge carries WireGuard messages between a device that owns its UDP
// socket (kernel WireGuard) and a conn.Bind that knows the paths (the
// node's: direct ICE pairs on the shared port, or the relay).
//
//	device 0.0.0.0:P ──► 127.0.0.1:Q(peer) ──► Bind.Send(peer's endpoint)
//	device 0.0.0.0:P ◄── 127.0.0.1:Q(peer) ◄── Bind receive (peer)
//
// Each peer gets its own local socket Q, connected to the device's port
// P, and the device is told that Q is the peer's endpoint. So the device
// names the peer by the socket it writes to, and the bridge names it to
// the device by the socket it writes from: no header, no lookup by
// content. A connected socket only hears P, so no other local process can
// speak for a peer. The Bind's workarounds for WireGuard's timing
// (handshake resends, receiver-index routing) ride on Send and receive as
// they do with wireguard-go in process.
type Bridge struct {
	bind   conn.Bind
	device netip.AddrPort
	log    *slog.Logger
	maxPkt int

	mu      sync.RWMutex      // guards the following
	byDst   map[string]*proxy // by the endpoint's DstToBytes
	byLocal map[netip.AddrPort]*proxy
	closed  bool

	wg        sync.WaitGroup
	closeOnce sync.Once
	unknown   atomic.Uint64 // received for a peer the device was not given
	sendErrs  atomic.Uint64
}

// proxy is one peer's local socket.
type proxy struct {
	ep    conn.Endpoint
	name  string // the endpoint as configured
	conn  *net.UDPConn
	pc    *ipv4.PacketConn // conn, batched (recvmmsg, sendmmsg)
	local netip.AddrPort
	// Counters: from the device to the peer, and back.
	out, in atomic.Uint64
}

// BridgeConfig configures a Bridge.
type BridgeConfig struct {
	// Bind carries packets to and from peers. Required; the Bridge opens
	// it and closes it on Close.
	Bind conn.Bind
	// Device is where the device listens. Required; its address must be
	// a loopback one.
	Device netip.AddrPort
	// MaxPacket is the largest datagram carried. If zero, 2048, the
	// node's Mux's datagram size (MTU 1420 plus WireGuard's overhead fits).
	MaxPacket int
	// Logger; if nil, logs are discarded.
	Logger *slog.Logger
}

// batch is how many datagrams one system call moves each way.
const batch = 32

// NewBridge opens cfg.Bind and starts carrying what it receives.
func NewBridge(cfg BridgeConfig) (*Bridge, error) {
	switch {
	case cfg.Bind == nil:
		return nil, errors.New("wgdev: bridge: no Bind")
	case !cfg.Device.IsValid() || !cfg.Device.Addr().IsLoopback():
		return nil, fmt.Errorf("wgdev: bridge: device address %v is not on loopback", cfg.Device)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fns, _, err := cfg.Bind.Open(0)
	if err != nil {
		return nil, fmt.Errorf("wgdev: bridge: open bind: %w", err)
	}
	if cfg.MaxPacket == 0 {
		cfg.MaxPacket = 2048
	}
	b := &Bridge{bind: cfg.Bind, device: cfg.Device, log: log.With("component", "bridge"), maxPkt: cfg.MaxPacket,
		byDst: map[string]*proxy{}, byLocal: map[netip.AddrPort]*proxy{}}
	for _, fn := range fns {
		b.wg.Add(1)
		go b.fromPeers(fn)
	}
	return b, nil
}

// Endpoint returns the local address standing for the peer the Bind
// endpoint name ep names, opening its socket the first time.
func (b *Bridge) Endpoint(ep string) (netip.AddrPort, error) {
	e, err := b.bind.ParseEndpoint(ep)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("wgdev: bridge: %w", err)
	}
	dst := string(e.DstToBytes())
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return netip.AddrPort{}, net.ErrClosed
	}
	if p := b.byDst[dst]; p != nil {
		return p.local, nil
	}
	c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, net.UDPAddrFromAddrPort(b.device))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("wgdev: bridge: local socket for %s: %w", ep, err)
	}
	p := &proxy{ep: e, name: ep, conn: c, pc: ipv4.NewPacketConn(c), local: c.LocalAddr().(*net.UDPAddr).AddrPort()}
	b.byDst[dst] = p
	b.byLocal[p.local] = p
	b.wg.Add(1)
	go b.fromDevice(p)
	return p.local, nil
}

// Name returns the endpoint name whose local address is local.
func (b *Bridge) Name(local netip.AddrPort) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.byLocal[netip.AddrPortFrom(local.Addr().Unmap(), local.Port())]
	if p == nil {
		return "", false
	}
	return p.name, true
}

// Remove closes the local socket of the peer named ep, if it has one.
// It does not ask the Bind (whose ParseEndpoint may make the peer anew).
func (b *Bridge) Remove(ep string) {
	b.mu.Lock()
	var p *proxy
	for dst, q := range b.byDst {
		if q.name == ep {
			p = q
			delete(b.byDst, dst)
			delete(b.byLocal, q.local)
			break
		}
	}
	b.mu.Unlock()
	if p != nil {
		p.conn.Close()
	}
}

// Unknown counts packets received for peers the device was not given.
func (b *Bridge) Unknown() uint64 { return b.unknown.Load() }

// fromPeers moves what one of the Bind's receive functions delivers to
// the device, each packet from its peer's socket; a run of packets for
// one peer goes in one sendmmsg.
func (b *Bridge) fromPeers(fn conn.ReceiveFunc) {
	defer b.wg.Done()
	n := min(b.bind.BatchSize(), batch)
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, b.maxPkt)
	}
	sizes := make([]int, n)
	eps := make([]conn.Endpoint, n)
	msgs := make([]ipv4.Message, n)
	for {
		n, err := fn(bufs, sizes, eps)
		if err != nil {
			if !b.isClosed() {
				b.log.Warn("bind receive ended", "err", err)
			}
			return
		}
		var run *proxy
		k := 0
		for i := range n {
			b.mu.RLock()
			p := b.byDst[string(eps[i].DstToBytes())]
			b.mu.RUnlock()
			if p == nil {
				b.unknown.Add(1)
				continue
			}
			if p != run {
				toDevice(run, msgs[:k])
				run, k = p, 0
			}
			msgs[k].Buffers = bufs[i : i+1 : i+1]
			bufs[i] = bufs[i][:sizes[i]]
			k++
		}
		toDevice(run, msgs[:k])
		for i := range bufs {
			bufs[i] = bufs[i][:cap(bufs[i])]
		}
	}
}

// toDevice writes msgs from p's socket. A failed write is packets lost,
// as on any UDP path; WireGuard retransmits what matters.
func toDevice(p *proxy, msgs []ipv4.Message) {
	for len(msgs) > 0 {
		n, err := p.pc.WriteBatch(msgs, 0)
		if err != nil || n == 0 {
			return
		}
		p.in.Add(uint64(n))
		msgs = msgs[n:]
	}
}

// fromDevice moves what the device sends to p's socket to the peer, a
// recvmmsg's worth per Send.
func (b *Bridge) fromDevice(p *proxy) {
	defer b.wg.Done()
	msgs := make([]ipv4.Message, batch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, b.maxPkt)}
	}
	bufs := make([][]byte, batch)
	for {
		n, err := p.pc.ReadBatch(msgs, 0)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				b.log.Warn("local socket", "peer", p.name, "err", err)
			}
			return
		}
		for i := range n {
			bufs[i] = msgs[i].Buffers[0][:msgs[i].N]
		}
		if err := b.bind.Send(bufs[:n], p.ep); err != nil {
			b.sendErrs.Add(1)
			continue
		}
		p.out.Add(uint64(n))
	}
}

func (b *Bridge) isClosed() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.closed
}

// Close closes the Bind and every local socket and waits for the
// goroutines that moved packets between them.
func (b *Bridge) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		proxies := b.byDst
		b.byDst, b.byLocal = map[string]*proxy{}, map[netip.AddrPort]*proxy{}
		b.mu.Unlock()
		_ = b.bind.Close()
		for _, p := range proxies {
			p.conn.Close()
		}
		b.wg.Wait()
	})
	return nil
}
