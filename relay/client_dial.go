package relay

import (
	"context"
	"crypto/tls"
	"errors"
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

type dialResult struct {
	transport string
	cc        *cconn
	err       error
}

// dial races the transports: QUIC first, TCP after TCPDelay (or as soon as
// QUIC fails). The first connection to authenticate wins, except that a
// TCP winner waits QUICGrace for a QUIC attempt still running, because
// datagrams suit WireGuard better than a TCP stream. Every attempt that
// does not win is cancelled and closed before dial returns.
func (c *Client) dial(ctx context.Context, tok Token) (*cconn, error) {
	ctx, cancel := context.WithCancel(ctx)
	results := make(chan dialResult, 2)
	running := 0
	start := func(t string) {
		running++
		go func() {
			cc, err := c.dialOne(ctx, t, tok)
			results <- dialResult{transport: t, cc: cc, err: err}
		}()
	}
	defer func() {
		cancel()
		for ; running > 0; running-- {
			if r := <-results; r.cc != nil {
				r.cc.w.closeConn()
			}
		}
	}()

	var tcpTimer <-chan time.Time
	tcpStarted := false
	switch c.cfg.Transport {
	case transportQUIC:
	case transportTCP:
		tcpStarted = true
		start(transportTCP)
	default:
		t := time.NewTimer(c.cfg.TCPDelay)
		defer t.Stop()
		tcpTimer = t.C
	}
	if c.cfg.Transport != transportTCP {
		start(transportQUIC)
	}
	var (
		errs  []error
		held  *cconn // a TCP winner waiting out QUICGrace
		grace <-chan time.Time
	)
	for {
		select {
		case <-tcpTimer:
			tcpTimer = nil
			if !tcpStarted {
				tcpStarted = true
				start(transportTCP)
			}
		case r := <-results:
			running--
			switch {
			case r.err != nil:
				errs = append(errs, r.err)
				if !tcpStarted && c.cfg.Transport == "" {
					tcpStarted, tcpTimer = true, nil
					start(transportTCP)
				}
			case r.transport == transportQUIC:
				if held != nil {
					held.w.closeConn()
				}
				return r.cc, nil
			case running == 0:
				return r.cc, nil
			default:
				held = r.cc
				t := time.NewTimer(c.cfg.QUICGrace)
				defer t.Stop()
				grace = t.C
			}
			if running == 0 && tcpTimer == nil {
				if held != nil {
					return held, nil
				}
				return nil, errors.Join(errs...)
			}
		case <-grace:
			return held, nil
		case <-ctx.Done():
			if held != nil {
				held.w.closeConn()
			}
			return nil, ctx.Err()
		}
	}
}

func (c *Client) dialOne(ctx context.Context, transport string, tok Token) (*cconn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	var (
		cc  *cconn
		err error
	)
	if transport == transportQUIC {
		cc, err = c.dialQUIC(ctx, tok)
	} else {
		cc, err = c.dialTCP(ctx, tok)
	}
	if err != nil {
		return nil, fmt.Errorf("relay: dial %s %s: %w", transport, c.cfg.Server, err)
	}
	return cc, nil
}

func (c *Client) dialTCP(ctx context.Context, tok Token) (*cconn, error) {
	nc, err := c.cfg.Network.Dial(ctx, "tcp", c.cfg.Server)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(nc, c.tls)
	w := newTCPWire(tc, frameSend)
	stop := context.AfterFunc(ctx, w.closeConn)
	if err := tc.HandshakeContext(ctx); err != nil {
		stop()
		w.closeConn()
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	return c.hello(ctx, w, tok, stop)
}

func (c *Client) dialQUIC(ctx context.Context, tok Token) (*cconn, error) {
	raddr, err := c.resolve(ctx)
	if err != nil {
		return nil, err
	}
	network := "udp4"
	if raddr.Addr().Is6() {
		network = "udp6"
	}
	pc, err := c.cfg.Network.ListenPacket(ctx, network, ":0")
	if err != nil {
		return nil, err
	}
	tr := &quic.Transport{Conn: pc, ConnectionIDLength: quicConnIDLen}
	cleanup := func() {
		_ = tr.Close()
		_ = pc.Close()
	}
	qc, err := tr.Dial(ctx, net.UDPAddrFromAddrPort(raddr), c.tls, c.quicConfig())
	if err != nil {
		cleanup()
		return nil, err
	}
	qs, err := qc.OpenStreamSync(ctx)
	if err != nil {
		_ = qc.CloseWithError(quic.ApplicationErrorCode(CloseNormal), "")
		cleanup()
		return nil, fmt.Errorf("open control stream: %w", err)
	}
	w := newQUICWire(qc, qs, frameSend, cleanup)
	return c.hello(ctx, w, tok, context.AfterFunc(ctx, w.closeConn))
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
func (c *Client) hello(ctx context.Context, w *wire, tok Token, stop func() bool) (*cconn, error) {
	cc, err := c.exchangeHello(w, tok)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		w.closeConn()
		return nil, err
	}
	return cc, nil
}

func (c *Client) exchangeHello(w *wire, tok Token) (*cconn, error) {
	if len(tok) > MaxTokenSize {
		return nil, fmt.Errorf("relay: hello: %d-byte token exceeds %d", len(tok), MaxTokenSize)
	}
	hello := frame{typ: frameHello, version: ProtocolVersion, key: c.cfg.Key, data: []byte(tok)}
	err := w.writeFrame(&hello)
	if err == nil {
		err = w.bw.Flush()
	}
	if err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	f, err := readFrame(w.br)
	if err != nil {
		if ce, ok := asRemoteClose(err); ok {
			return nil, ce
		}
		return nil, fmt.Errorf("waiting for welcome: %w", err)
	}
	switch {
	case f.typ == frameClose:
		return nil, remoteClose(f.reason, string(f.data))
	case f.typ != frameWelcome:
		return nil, fmt.Errorf("%w: %s instead of WELCOME", ErrProtocol, f.typ)
	case f.version != ProtocolVersion:
		return nil, fmt.Errorf("%w: server speaks version %d", ErrProtocol, f.version)
	}
	w.onSent = func(pkt []byte, _ bool) {
		c.stats.packetsSent.Add(1)
		c.stats.bytesSent.Add(uint64(len(pkt)))
	}
	return &cconn{
		w:         w,
		sendq:     make(chan outPacket, c.cfg.QueueLen),
		keepalive: max(time.Duration(f.keepalive)*time.Millisecond, minKeepAlive),
	}, nil
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
