package relay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// ClientConfig configures a Client. Server, Key and Token are required.
type ClientConfig struct {
	// Network is where the client dials. If nil, netx.OS.
	Network netx.Network
	// Server is the relay's host:port (one port for QUIC and TCP).
	// Required. A host name needs a Network that implements
	// netx.Resolver.
	Server string
	// ServerName is the name the server's certificate is verified
	// against. If empty, the host part of Server.
	ServerName string
	// Fingerprint pins the server's certificate (see CertFingerprint), as
	// control publishes it for a relay with a self-signed certificate.
	// When set, it replaces chain and name verification. If empty, the
	// certificate is verified against RootCAs.
	Fingerprint string
	// RootCAs verifies the server's certificate when no Fingerprint is
	// set. If nil, the system roots.
	RootCAs *x509.CertPool
	// Key is this node's WireGuard public key. Required.
	Key key.Public
	// Token is the relay token control issued for Key. Required. Unless
	// RenewToken is set, replace it with SetToken before it expires.
	Token Token
	// RenewToken fetches a fresh token for Key from control. The client
	// calls it once two thirds of the current token's life (from when the
	// client got it to its expiry) have passed, and at once when the
	// relay refuses the token (then it reconnects without waiting out the
	// backoff). It must respect ctx. If nil, only SetToken replaces the
	// token.
	RenewToken func(ctx context.Context) (Token, error)
	// Logger receives the client's logs. If nil, logs are discarded.
	Logger *slog.Logger
	// OnPeerGone is called when the relay reports that a peer this client
	// sent to is not connected, or has disconnected. It runs on the
	// client's read goroutine and must not block. If nil, reports are
	// only counted.
	OnPeerGone func(peer key.Public, reason GoneReason)
	// Transport restricts the client to "quic" or "tcp". If empty, both
	// are raced and the better one by measurement is kept (client_race.go).
	Transport string
	// RaceWait is how long a race waits, once one transport has
	// connected, for the other before comparing them (a transport not
	// connected by then loses). If zero, 300ms.
	RaceWait time.Duration
	// Remeasure is how often a racing client measures both transports
	// again while connected, moving to the other when it wins. If zero,
	// 5 minutes; negative: never.
	Remeasure time.Duration
	// DialTimeout bounds one connection attempt, handshake and HELLO
	// included. If zero, 10s.
	DialTimeout time.Duration
	// QueueLen bounds packets waiting to be written; Send blocks while it
	// is full. If zero, 256.
	QueueLen int
	// RecvQueueLen bounds received packets waiting for Recv; beyond it
	// they are dropped and counted. If zero, 1024.
	RecvQueueLen int
	// MinBackoff and MaxBackoff bound the jittered exponential delay
	// between connection attempts. If zero, 100ms and 30s.
	MinBackoff, MaxBackoff time.Duration
}

func (c *ClientConfig) setDefaults() error {
	if c.Network == nil {
		c.Network = netx.OS
	}
	if c.Server == "" {
		return errors.New("relay: client config: no Server")
	}
	if _, _, err := net.SplitHostPort(c.Server); err != nil {
		return fmt.Errorf("relay: client config: server %q: %w", c.Server, err)
	}
	if c.Key.IsZero() {
		return errors.New("relay: client config: zero Key")
	}
	if c.Token == "" {
		return errors.New("relay: client config: no Token")
	}
	switch c.Transport {
	case "", transportQUIC, transportTCP:
	default:
		return fmt.Errorf("relay: client config: unknown transport %q (want quic, tcp or empty)", c.Transport)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.RaceWait, 300*time.Millisecond)
	if c.Remeasure == 0 {
		c.Remeasure = 5 * time.Minute
	}
	def(&c.DialTimeout, 10*time.Second)
	def(&c.MinBackoff, 100*time.Millisecond)
	def(&c.MaxBackoff, 30*time.Second)
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	if c.QueueLen <= 0 {
		c.QueueLen = 256
	}
	if c.RecvQueueLen <= 0 {
		c.RecvQueueLen = 1024
	}
	return nil
}

// stableAfter is how long a connection must last for the next failure to
// start the backoff over; shorter ones keep escalating it, so two clients
// fighting over one key (see CloseReplaced) do not reconnect in a loop.
const stableAfter = 10 * time.Second

// Client is a node's connection to one relay. It connects in the
// background, racing QUIC and TCP, and reconnects with jittered
// exponential backoff whenever the connection is lost. Send and Recv are
// what a WireGuard Bind needs: packets to and from peers by key.
type Client struct {
	cfg   ClientConfig
	log   *slog.Logger
	tls   *tls.Config
	recvq chan inPacket
	cur   atomic.Pointer[cconn] // the live connection, or nil
	// dialq, while cur is nil and a connection is being dialed, is that
	// connection's send queue: Send queues there, and the packets follow
	// HELLO without waiting for WELCOME (exchangeHello).
	dialq atomic.Pointer[pktQueue]
	stats clientCounters

	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	renewMu  sync.Mutex    // serializes RenewToken calls
	tokenSet chan struct{} // signalled when the token changes

	mu      sync.Mutex // guards the following
	token   Token
	tokenAt time.Time                 // when token was set
	lastErr error                     // why the last attempt or connection ended
	changed chan struct{}             // closed and replaced on every state change
	probes  map[[8]byte]chan struct{} // Probe's pings awaiting their pong

	probeSeq  atomic.Uint64
	switching atomic.Bool // remeasure ended the connection for the other transport
}

type inPacket struct {
	src key.Public
	pkt []byte
}

// cconn is one established connection of a Client.
type cconn struct {
	w         *wire
	sendq     *pktQueue
	keepalive time.Duration
	why       string // why this transport: "configured", or the race's measurement
}

// ClientStats counts what a Client did.
type ClientStats struct {
	Connects        uint64 // connections established, first and reconnects
	PacketsSent     uint64
	BytesSent       uint64
	PacketsReceived uint64
	BytesReceived   uint64
	RecvDropped     uint64 // received packets dropped because Recv fell behind
	PeerGone        uint64 // PEER_GONE reports received
	// TokenRenewals and TokenRenewalFailures count RenewToken calls
	// that brought a fresh token and those that failed.
	TokenRenewals        uint64
	TokenRenewalFailures uint64
}

type clientCounters struct {
	connects, packetsSent, bytesSent, packetsReceived, bytesReceived, recvDropped, peerGone atomic.Uint64
	renewals, renewFailures                                                                 atomic.Uint64
}

// NewClient validates cfg and starts connecting in the background; use
// WaitConnected to wait for the first connection.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(cfg.Server)
	tc, err := clientTLS(&cfg, host)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "relay-client", "server", cfg.Server),
		tls:      tc,
		recvq:    make(chan inPacket, cfg.RecvQueueLen),
		ctx:      ctx,
		cancel:   cancel,
		token:    cfg.Token,
		tokenAt:  time.Now(),
		tokenSet: make(chan struct{}, 1),
		changed:  make(chan struct{}),
	}
	// A packet sent as soon as NewClient returns waits for the first
	// connection (see Send).
	c.dialq.Store(newPktQueue(cfg.QueueLen))
	c.wg.Add(1)
	go c.run()
	if cfg.RenewToken != nil {
		c.wg.Add(1)
		go c.renewLoop()
	}
	return c, nil
}

// Key returns the client's node key.
func (c *Client) Key() key.Public { return c.cfg.Key }

// Transport returns "quic" or "tcp" while connected, "" otherwise.
func (c *Client) Transport() string {
	if cc := c.cur.Load(); cc != nil {
		return cc.w.transport
	}
	return ""
}

// TransportReason says why the client uses its transport now: "configured",
// or the race's measurement ("measured: QUIC handshake 1.2ms against
// TCP+TLS's 1.1ms ..."); "" while disconnected.
func (c *Client) TransportReason() string {
	if cc := c.cur.Load(); cc != nil {
		return cc.why
	}
	return ""
}

// Stats returns a snapshot of the client's counters.
func (c *Client) Stats() ClientStats {
	s := &c.stats
	return ClientStats{
		Connects:        s.connects.Load(),
		PacketsSent:     s.packetsSent.Load(),
		BytesSent:       s.bytesSent.Load(),
		PacketsReceived: s.packetsReceived.Load(),
		BytesReceived:   s.bytesReceived.Load(),
		RecvDropped:     s.recvDropped.Load(),
		PeerGone:        s.peerGone.Load(),

		TokenRenewals:        s.renewals.Load(),
		TokenRenewalFailures: s.renewFailures.Load(),
	}
}

// WaitConnected returns nil once the client is connected. It returns
// early with the relay's *CloseError when the relay refused the token and
// there is no RenewToken, or renewing failed too (the client keeps
// retrying in the background; SetToken can fix it),
// with ErrClosed after Close, and with ctx's error, joined with the last
// attempt's, when ctx ends first.
func (c *Client) WaitConnected(ctx context.Context) error {
	for {
		c.mu.Lock()
		changed, last := c.changed, c.lastErr
		c.mu.Unlock()
		if c.cur.Load() != nil {
			return nil
		}
		if c.authFinal(last) {
			return fmt.Errorf("relay: connect to %s: %w", c.cfg.Server, last)
		}
		select {
		case <-changed:
		case <-c.ctx.Done():
			return ErrClosed
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("relay: connect to %s: %w (last attempt: %w)", c.cfg.Server, ctx.Err(), last)
			}
			return fmt.Errorf("relay: connect to %s: %w", c.cfg.Server, ctx.Err())
		}
	}
}

// Send queues pkt for the peer dst; pkt is copied, so the caller may reuse
// it. It blocks while the send queue is full, like a socket. While a
// connection is being dialed, the packet waits for it (without blocking:
// beyond QueueLen packets Send fails with ErrNotConnected) and goes out
// right behind HELLO; if that attempt fails, it is lost. Between attempts
// Send fails at once with ErrNotConnected (packets are not buffered
// across reconnects: WireGuard retransmits what matters). Delivery is not
// guaranteed.
func (c *Client) Send(dst key.Public, pkt []byte) error {
	if len(pkt) == 0 || len(pkt) > MaxPacketSize {
		return fmt.Errorf("relay: send %d bytes to %s: %w", len(pkt), dst.ShortString(), ErrPacketSize)
	}
	cc := c.cur.Load()
	if cc == nil {
		if c.ctx.Err() != nil {
			return ErrClosed
		}
		q := c.dialq.Load()
		if q == nil {
			// The dial may have just succeeded: run publishes the
			// connection before it clears dialq.
			if cc = c.cur.Load(); cc == nil {
				return ErrNotConnected
			}
		} else {
			p := copyPacket(dst, pkt)
			if !q.push(p) {
				p.release()
				return ErrNotConnected
			}
			return nil
		}
	}
	if w := cc.w; w.qc != nil {
		// Fast path: an acknowledged peer's datagram goes straight to
		// quic-go from the caller's goroutine, which blocks (like a
		// socket) while quic-go's send queue is full.
		if id, ok := w.out.ackedID(dst); ok {
			buf := packetPool.Get().(*[]byte)
			sent, err := w.sendDatagram((*buf)[:0:cap(*buf)], id, pkt)
			packetPool.Put(buf)
			if sent {
				return nil
			}
			if err != nil {
				if c.ctx.Err() != nil {
					return ErrClosed
				}
				return fmt.Errorf("relay: send to %s: %w: %w", dst.ShortString(), ErrNotConnected, err)
			}
		}
	}
	p := copyPacket(dst, pkt)
	for !cc.sendq.push(p) {
		space := cc.sendq.waitSpace()
		if space == nil {
			continue
		}
		select {
		case <-space:
		case <-cc.w.done:
			p.release()
			return ErrNotConnected
		case <-c.ctx.Done():
			p.release()
			return ErrClosed
		}
	}
	return nil
}

// Recv returns the next packet a peer sent through the relay. The packet
// is the caller's. It fails with ErrClosed after Close and with ctx's
// error when ctx ends first.
func (c *Client) Recv(ctx context.Context) (src key.Public, pkt []byte, err error) {
	select {
	case p := <-c.recvq:
		return p.src, p.pkt, nil
	case <-ctx.Done():
		return key.Public{}, nil, ctx.Err()
	case <-c.ctx.Done():
		return key.Public{}, nil, ErrClosed
	}
}

// Close closes the connection (telling the relay) and stops reconnecting.
// It returns when every goroutine the client started has returned.
// Idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
	})
	return nil
}

// setState publishes the live connection (or its absence) and why the
// last one ended.
func (c *Client) setState(cc *cconn, err error) {
	c.cur.Store(cc)
	c.mu.Lock()
	if err != nil || cc != nil {
		c.lastErr = err
	}
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// run connects, serves and reconnects until Close.
func (c *Client) run() {
	defer c.wg.Done()
	failures, refusals := 0, 0
	for c.ctx.Err() == nil {
		tok := c.currentToken()
		q := c.dialq.Load() // NewClient's, for the first attempt
		if q == nil {
			q = newPktQueue(c.cfg.QueueLen)
			c.dialq.Store(q)
		}
		cc, err := c.dial(c.ctx, tok, q)
		if err != nil {
			err = cleanPeerError(err)
			c.dialq.Store(nil)
			q.discard()
			if c.ctx.Err() != nil {
				return
			}
			failures++
			now := false
			if refusedToken(err) && c.cfg.RenewToken != nil {
				// A relay that says expired may have a clock ahead of
				// ours; a fresh token is the cure for every refusal.
				// Retry at once after the first renewal that worked (a
				// failed one, e.g. a node whose control session is not up
				// yet, does not use up the immediate retry).
				refusals++
				if rerr := c.renew(tok, "relay refused the token"); rerr != nil {
					err = errors.Join(err, rerr)
					refusals = 0
				} else {
					now = refusals == 1
				}
			} else {
				refusals = 0
			}
			c.setState(nil, err)
			if now {
				c.log.Info("relay refused the token; renewed it, reconnecting", "err", err)
				continue
			}
			d := c.backoff(failures)
			c.log.Warn("relay connect failed", "err", err, "retry_in", d)
			if !c.sleep(d) {
				return
			}
			continue
		}
		refusals = 0
		start := time.Now()
		c.stats.connects.Add(1)
		c.setState(cc, nil)
		c.dialq.Store(nil) // after setState: Send finds cur or dialq
		c.log.Info("relay connected", "transport", cc.w.transport)
		err = c.serve(cc)
		c.setState(nil, err)
		if c.ctx.Err() != nil {
			return
		}
		if c.switching.Swap(false) {
			continue // remeasure found the other transport better: now
		}
		if time.Since(start) >= stableAfter {
			failures = 0
		}
		failures++
		d := c.backoff(failures)
		c.log.Warn("relay connection lost", "transport", cc.w.transport, "err", err, "retry_in", d)
		if !c.sleep(d) {
			return
		}
	}
}

// backoff returns the delay before attempt n+1: MinBackoff doubled per
// failure up to MaxBackoff, then drawn uniformly from its upper half so
// clients that lost one relay together do not return together.
func (c *Client) backoff(failures int) time.Duration {
	d := c.cfg.MaxBackoff
	if shift := failures - 1; shift < 30 {
		d = min(d, c.cfg.MinBackoff<<shift)
	}
	return d/2 + rand.N(d/2+1) // #nosec G404 -- jitter needs no cryptographic randomness
}

func (c *Client) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// serve runs an established connection until it fails or Close.
func (c *Client) serve(cc *cconn) error {
	w := cc.w
	stop := context.AfterFunc(c.ctx, func() { w.fail(CloseNormal, "client closing", nil, false) })
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { w.writeLoop(cc.sendq) })
	wg.Go(func() { w.watchdog(cc.keepalive, false) })
	if w.qc != nil {
		wg.Go(func() { w.readDatagrams(c.deliver, func(dropReason) {}) })
	}
	if c.cfg.Transport == "" && c.cfg.Remeasure > 0 {
		wg.Go(func() { c.remeasure(cc) })
	}
	c.readLoop(w)
	wg.Wait()
	w.closeConn()
	cc.sendq.discard()
	return w.closeErr()
}

func (c *Client) readLoop(w *wire) {
	for {
		f, err := readFrame(w.br)
		if err != nil {
			w.readError(err)
			return
		}
		w.markSeen()
		switch f.typ {
		case frameRecv:
			c.deliver(f.key, append([]byte(nil), f.data...))
		case framePing:
			w.queueCtrl(frame{typ: framePong, ping: f.ping})
		case framePong:
			c.pong(f.ping)
		case framePeerGone:
			c.stats.peerGone.Add(1)
			if c.cfg.OnPeerGone != nil {
				c.cfg.OnPeerGone(f.key, GoneReason(f.reason))
			}
		case frameBind, frameBindAck:
			if err := w.handleIDFrame(&f); err != nil {
				w.fail(CloseProtocol, err.Error(), err, false)
				return
			}
		case frameFeatures:
			w.handleFeatures(&f)
		case frameClose:
			if err := w.peerClosed(&f); err != nil {
				w.fail(CloseProtocol, err.Error(), err, false)
			}
			return
		default:
			if f.typ >= firstUnknownFrame {
				continue
			}
			err := fmt.Errorf("%w: unexpected %s from the relay", ErrProtocol, f.typ)
			w.fail(CloseProtocol, err.Error(), err, false)
			return
		}
	}
}

// Probe checks that the relay still answers on the current connection: it
// sends a ping and waits up to timeout for the pong. A connection that
// stays silent is closed, and the client reconnects at once. This is for
// when the caller has reason to doubt the path (its direct paths just
// went silent: a NAT on the way may have rebooted and forgotten the
// connection's mapping, which the keepalive would only notice after three
// intervals). Without a connection, Probe returns ErrNotConnected: the
// client is reconnecting already.
func (c *Client) Probe(ctx context.Context, timeout time.Duration) error {
	cc := c.cur.Load()
	if cc == nil {
		return ErrNotConnected
	}
	var id [8]byte
	// The top bit keeps probes apart from the watchdog's pings.
	binary.BigEndian.PutUint64(id[:], c.probeSeq.Add(1)|1<<63)
	got := make(chan struct{})
	c.mu.Lock()
	if c.probes == nil {
		c.probes = map[[8]byte]chan struct{}{}
	}
	c.probes[id] = got
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.probes, id)
		c.mu.Unlock()
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	// The ping waits for room among the writer's control frames; a writer
	// that cannot take one within timeout is stuck on the connection too.
	ping := cc.w.ctrl
	for ping != nil || got != nil {
		select {
		case ping <- frame{typ: framePing, ping: id}:
			ping = nil
		case <-got:
			return nil
		case <-cc.w.done:
			return ErrNotConnected
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			ping, got = nil, nil
		}
	}
	msg := fmt.Sprintf("no answer to a probe within %v", timeout)
	cc.w.fail(CloseIdle, msg, nil, false)
	return fmt.Errorf("relay %s: %s: %w", c.cfg.Server, msg, ErrNotConnected)
}

// pong wakes the Probe waiting for id, if any.
func (c *Client) pong(id [8]byte) {
	c.mu.Lock()
	ch := c.probes[id]
	delete(c.probes, id)
	c.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// deliver queues a received packet for Recv; pkt must be owned.
func (c *Client) deliver(src key.Public, pkt []byte) {
	select {
	case c.recvq <- inPacket{src: src, pkt: pkt}:
		c.stats.packetsReceived.Add(1)
		c.stats.bytesReceived.Add(uint64(len(pkt)))
	default:
		c.stats.recvDropped.Add(1)
	}
}
