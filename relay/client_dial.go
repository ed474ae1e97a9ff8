package relay

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/latticelab/lattice/netx"
)

// minKeepAlive bounds the keepalive a server may announce, so a broken
// or hostile WELCOME cannot make the client spin.
const minKeepAlive = 10 * time.Millisecond

// dial connects and authenticates: over the configured transport, or,
// with none configured, over the one race picks by measurement. q becomes
// the connection's send queue: what it holds when HELLO goes out follows
// HELLO in the same flush (see exchangeHello).
func (c *Client) dial(ctx context.Context, tok Token, q *pktQueue) (*cconn, error) {
	var (
		a   *attempt
		why string
		err error
	)
	if t := c.cfg.Transport; t != "" {
		a, err = c.connect(ctx, t)
		why = "configured"
	} else {
		a, why, err = c.race(ctx)
	}
	if err != nil {
		return nil, err
	}
	defer a.cancel()
	cc, err := c.hello(a.ctx, a.w, tok, q, a.stop)
	if err != nil {
		return nil, fmt.Errorf("relay: dial %s %s: %w", a.transport, c.cfg.Server, err)
	}
	cc.why = why
	return cc, nil
}

// dialOne connects and authenticates over transport; q is as for dial.
func (c *Client) dialOne(ctx context.Context, transport string, tok Token, q *pktQueue) (*cconn, error) {
	a, err := c.connect(ctx, transport)
	if err != nil {
		return nil, err
	}
	defer a.cancel()
	cc, err := c.hello(a.ctx, a.w, tok, q, a.stop)
	if err != nil {
		return nil, fmt.Errorf("relay: dial %s %s: %w", transport, c.cfg.Server, err)
	}
	return cc, nil
}

// attempt is a connection whose transport and TLS handshakes are done,
// not yet authenticated; handshake is how long they took, from the first
// packet to a connection ready for HELLO: a TCP and a TLS handshake, or
// QUIC's, each with one TLS key exchange and certificate check.
type attempt struct {
	transport string
	w         *wire
	handshake time.Duration
	ctx       context.Context // bounds the attempt, HELLO included
	cancel    context.CancelFunc
	stop      func() bool // disarms ctx's close of w
}

// close abandons a.
func (a *attempt) close() {
	a.stop()
	a.w.closeConn()
	a.cancel()
}

// connect makes transport's connection to the server, bounded by
// DialTimeout, and times its handshakes.
func (c *Client) connect(ctx context.Context, transport string) (*attempt, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	a := &attempt{transport: transport, ctx: ctx, cancel: cancel}
	var err error
	if transport == transportQUIC {
		err = c.dialQUIC(a)
	} else {
		err = c.dialTCP(a)
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("relay: dial %s %s: %w", transport, c.cfg.Server, err)
	}
	return a, nil
}

// dialTCP connects over TCP and TLS, timing both handshakes.
func (c *Client) dialTCP(a *attempt) error {
	start := time.Now()
	nc, err := c.cfg.Network.Dial(a.ctx, "tcp", c.cfg.Server)
	if err != nil {
		return err
	}
	tc := tls.Client(nc, c.tls)
	a.w = newTCPWire(tc, frameSend)
	a.stop = context.AfterFunc(a.ctx, a.w.closeConn)
	if err := tc.HandshakeContext(a.ctx); err != nil {
		a.stop()
		a.w.closeConn()
		return fmt.Errorf("tls handshake: %w", err)
	}
	a.handshake = time.Since(start)
	return nil
}

// dialQUIC connects over QUIC, timing its handshake.
func (c *Client) dialQUIC(a *attempt) error {
	ctx := a.ctx
	raddr, err := c.resolve(ctx)
	if err != nil {
		return err
	}
	network := "udp4"
	if raddr.Addr().Is6() {
		network = "udp6"
	}
	pc, err := c.cfg.Network.ListenPacket(ctx, network, ":0")
	if err != nil {
		return err
	}
	tr := &quic.Transport{Conn: pc, ConnectionIDLength: quicConnIDLen}
	cleanup := func() {
		_ = tr.Close()
		_ = pc.Close()
	}
	start := time.Now()
	qc, err := tr.Dial(ctx, net.UDPAddrFromAddrPort(raddr), c.tls, c.quicConfig())
	if err != nil {
		cleanup()
		return err
	}
	a.handshake = time.Since(start)
	qs, err := qc.OpenStreamSync(ctx)
	if err != nil {
		_ = qc.CloseWithError(quic.ApplicationErrorCode(CloseNormal), "")
		cleanup()
		return fmt.Errorf("open control stream: %w", err)
	}
	a.w = newQUICWire(qc, qs, frameSend, cleanup)
	a.stop = context.AfterFunc(ctx, a.w.closeConn)
	return nil
}

func (c *Client) quicConfig() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout: c.cfg.DialTimeout,
		// The server's idle timeout (three keepalives) governs; QUIC
		// takes the smaller of the two.
		MaxIdleTimeout:        time.Hour,
		InitialPacketSize:     quicPacketSize,
		EnableDatagrams:       true,
		MaxIncomingStreams:    -1,
		MaxIncomingUniStreams: -1,
	}
}

// hello authenticates an established connection: HELLO out, WELCOME (or
// the server's refusal) back. stop disarms the close that ctx's end
// triggers; if it already fired, the attempt is lost.
func (c *Client) hello(ctx context.Context, w *wire, tok Token, q *pktQueue, stop func() bool) (*cconn, error) {
	cc, err := c.exchangeHello(w, tok, q)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		w.closeConn()
		return nil, err
	}
	return cc, nil
}

// exchangeHello sends HELLO and, in the same flush, the packets q holds
// (pipelined: they need not wait a round trip for WELCOME; the server
// reads them only once it has accepted HELLO, and drops them with the
// connection if it refuses it, docs/LRP.md §1). Packets queued later
// wait in q for the connection's writer, which starts after WELCOME.
func (c *Client) exchangeHello(w *wire, tok Token, q *pktQueue) (*cconn, error) {
	if len(tok) > MaxTokenSize {
		return nil, fmt.Errorf("relay: hello: %d-byte token exceeds %d", len(tok), MaxTokenSize)
	}
	w.onSent = func(pkt []byte, _ bool) {
		c.stats.packetsSent.Add(1)
		c.stats.bytesSent.Add(uint64(len(pkt)))
	}
	hello := frame{typ: frameHello, version: ProtocolVersion, key: c.cfg.Key, data: []byte(tok)}
	f, err := c.sendHello(w, &hello, q)
	if err != nil {
		return nil, err
	}
	if f.version != ProtocolVersion {
		return nil, fmt.Errorf("%w: server speaks version %d", ErrProtocol, f.version)
	}
	return &cconn{
		w:         w,
		sendq:     q,
		keepalive: max(time.Duration(f.keepalive)*time.Millisecond, minKeepAlive),
	}, nil
}

// sendHello writes hello and the packets behind it (writeEarly) in one
// flush and returns the server's WELCOME, or its refusal as a
// *CloseError.
func (c *Client) sendHello(w *wire, hello *frame, q *pktQueue) (frame, error) {
	err := w.writeFrame(hello)
	if err == nil {
		err = w.writeFeatures()
	}
	if err == nil {
		err = c.writeEarly(w, q)
	}
	if err == nil {
		err = w.bw.Flush()
	}
	if err != nil {
		// A server that refused HELLO closes the connection without
		// reading what followed it, and the rest of the flush may meet
		// that close (the TLS records after the first leave in writes
		// of their own); its answer, which says why, may be in already.
		if f, rerr := readFrame(w.br); rerr == nil && f.typ == frameClose {
			return frame{}, remoteClose(f.reason, string(f.data))
		} else if ce, ok := asRemoteClose(rerr); ok {
			return frame{}, ce
		}
		return frame{}, fmt.Errorf("hello: %w", err)
	}
	f, err := readFrame(w.br)
	if err != nil {
		if ce, ok := asRemoteClose(err); ok {
			return frame{}, ce
		}
		return frame{}, fmt.Errorf("waiting for welcome: %w", err)
	}
	switch f.typ {
	case frameClose:
		return frame{}, remoteClose(f.reason, string(f.data))
	case frameWelcome:
		return f, nil
	default:
		return frame{}, fmt.Errorf("%w: %s instead of WELCOME", ErrProtocol, f.typ)
	}
}

// maxEarly bounds the packet bytes that follow HELLO before WELCOME: a
// first flight's worth (TCP's initial window is ten segments). More would
// not arrive sooner, and a client whose HELLO is refused must not block
// writing into a connection the server no longer reads: it has to read
// the refusal's code, which decides whether it renews its token.
const maxEarly = 12 << 10

// writeEarly writes packets q holds behind HELLO, as the writer would,
// until maxEarly bytes; on QUIC that is a BIND and a SEND on the control
// stream for each new peer, as no id can be acknowledged before WELCOME.
// The rest stay queued for the writer.
func (c *Client) writeEarly(w *wire, q *pktQueue) error {
	var err error
	batch := make([]outPacket, 0, 1)
	for n := 0; err == nil && q.peekLen() > 0 && n+q.peekLen() <= maxEarly; {
		batch = q.pop(batch[:0], 1)
		for i := range batch {
			n += len(batch[i].pkt)
			err = w.writePacket(&batch[i])
			batch[i].release()
		}
	}
	return err
}

// resolve turns Server into an address for QUIC. TCP dials the name
// itself, through the same Network.
func (c *Client) resolve(ctx context.Context) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(c.cfg.Server); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	host, portStr, _ := net.SplitHostPort(c.cfg.Server)
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q: %w", portStr, err)
	}
	r, ok := c.cfg.Network.(netx.Resolver)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("resolve %q: %w", host, netx.ErrNoResolver)
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("resolve %q: %w", host, err)
	}
	if len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("resolve %q: no addresses", host)
	}
	return netip.AddrPortFrom(ips[0].Unmap(), uint16(port)), nil
}
