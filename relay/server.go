package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"

	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// ServerConfig configures a Server. Only Secret is required.
type ServerConfig struct {
	// Network is where the server listens. If nil, netx.OS.
	Network netx.Network
	// Addr is the host:port both listeners bind: UDP for QUIC and TCP on
	// the same port number. Port 0 picks a port free for both. If empty,
	// "127.0.0.1:0"; an empty host ("":443) binds every address.
	Addr string
	// TLS is the server's TLS configuration (cloned; NextProtos and
	// MinVersion are overridden with ALPN and TLS 1.3, and so are they in
	// the configs its GetConfigForClient returns). If nil, the key pair
	// in CertFile and KeyFile is loaded; if those are empty too, a
	// self-signed certificate is generated, whose fingerprint (see
	// Fingerprint) control publishes for clients to pin.
	TLS               *tls.Config
	CertFile, KeyFile string
	// Secret verifies relay tokens (see IssueToken); control holds the
	// same one. Required, at least MinSecretSize bytes.
	Secret []byte
	// Now is the clock token expiry is checked against. If nil, time.Now.
	Now func() time.Time
	// Logger receives the server's logs. If nil, logs are discarded.
	Logger *slog.Logger
	// Registerer receives the server's Prometheus metrics (docs/LRP.md);
	// they are unregistered on Close. Wrap it with
	// prometheus.WrapRegistererWith to run several servers against one
	// registry. If nil, nothing is registered; Stats still counts.
	Registerer prometheus.Registerer
	// MaxClients bounds connected clients; more are refused with
	// CloseServerFull. If zero, 10000.
	MaxClients int
	// MaxPending bounds connections that have not authenticated yet (in
	// their TLS or QUIC handshake, or before their HELLO). A connection
	// beyond it evicts the oldest one pending instead of being refused,
	// so connections that only sit there cannot lock clients out. If
	// zero, 1024.
	MaxPending int
	// MaxPendingPerSource bounds pending connections from one source (an
	// IPv4 address, an IPv6 /64); beyond it a new connection evicts its
	// source's oldest. If zero, 256: a quarter of the table, so one source
	// cannot fill it, and room for a burst of real clients behind one NAT
	// (at 64, 200 clients of one address reconnecting at once on a loaded
	// machine connected at 0.6x the rate, retrying).
	MaxPendingPerSource int
	// QueueLen bounds each client's queue of packets waiting to be sent
	// to it; packets beyond it are dropped (reason "queue_full"). If zero,
	// 1024: about 1.4 MB of full-size packets, a bandwidth-delay product
	// at 500 Mbit/s and 20 ms, so a relayed TCP flow toward a client
	// whose own TCP is still ramping up backs up here instead of losing
	// packets (256 dropped a third of a 900-packet burst to a client
	// 20 ms away). The queue takes memory only for the packets it holds.
	QueueLen int
	// PacketRate bounds the packets per second each client may send,
	// with bursts of a tenth of a second (at least QueueLen packets);
	// packets beyond it are dropped (reason "rate_limited"). If zero,
	// 200000; negative means unlimited.
	PacketRate int
	// KeepAlive is the interval of the server's PINGs; a connection on
	// which nothing arrives for three intervals is closed. Clients learn
	// it from WELCOME. If zero, 20s, which keeps NAT mappings with
	// 30-second UDP timeouts alive.
	KeepAlive time.Duration
	// AuthTimeout bounds the TLS (or QUIC) handshake plus the HELLO. If
	// zero, 3s: a handshake is one round trip, and one lost packet's
	// retransmission fits too.
	AuthTimeout time.Duration
	// HelloTimeout bounds each wait in which a client has nothing to wait
	// for: on TCP for the first bytes of its ClientHello after the
	// connection is accepted, and on both transports for its HELLO after
	// the handshake completed (a client sends it at once). If zero, 500ms.
	HelloTimeout time.Duration
}

func (c *ServerConfig) setDefaults() error {
	if c.Network == nil {
		c.Network = netx.OS
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:0"
	}
	if len(c.Secret) < MinSecretSize {
		return fmt.Errorf("relay: server config: %d-byte secret: %w", len(c.Secret), ErrWeakSecret)
	}
	c.Secret = append([]byte(nil), c.Secret...)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"MaxClients", &c.MaxClients, 10000}, {"MaxPending", &c.MaxPending, 1024}, {"MaxPendingPerSource", &c.MaxPendingPerSource, 256}, {"QueueLen", &c.QueueLen, 1024}} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < 0 {
			return fmt.Errorf("relay: server config: negative %s %d", f.name, *f.v)
		}
	}
	if c.PacketRate == 0 {
		c.PacketRate = 200_000
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = 20 * time.Second
	}
	if c.AuthTimeout == 0 {
		c.AuthTimeout = 3 * time.Second
	}
	if c.HelloTimeout == 0 {
		c.HelloTimeout = 500 * time.Millisecond
	}
	if c.KeepAlive < 0 || c.AuthTimeout < 0 || c.HelloTimeout < 0 {
		return errors.New("relay: server config: negative KeepAlive, AuthTimeout or HelloTimeout")
	}
	if c.KeepAlive.Milliseconds() > int64(^uint32(0)) {
		return fmt.Errorf("relay: server config: KeepAlive %v too long", c.KeepAlive)
	}
	return nil
}

// Server is an LRP relay: it authenticates clients by their relay token
// and forwards packets between them by destination key, over QUIC
// datagrams or TLS-over-TCP frames, both on one port number.
type Server struct {
	cfg ServerConfig
	log *slog.Logger
	// quicTLS and tcpTLS are the server's TLS configuration, checking each
	// ClientHello's ALPN (handshakeTLS).
	quicTLS, tcpTLS *tls.Config
	fp              string
	addr            netip.AddrPort
	pc              net.PacketConn
	tr              *quic.Transport
	ql              *quic.EarlyListener
	tl              net.Listener
	m               metrics
	pre             *preauth // connections still authenticating

	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup // accept loops and connections
	closeOnce sync.Once
	closeErr  error

	mu      sync.RWMutex // guards the following
	clients map[key.Public]*sconn
	closed  bool
}

// NewServer listens on cfg.Addr (UDP and TCP) and serves until Close.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	tc, fp, err := serverTLS(&cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "relay"),
		fp:      fp,
		pre:     newPreauth(cfg.MaxPending, cfg.MaxPendingPerSource),
		ctx:     ctx,
		cancel:  cancel,
		clients: make(map[key.Public]*sconn),
	}
	s.quicTLS, s.tcpTLS = s.handshakeTLS(tc, false), s.handshakeTLS(tc, true)
	s.pc, s.tl, err = listenPair(ctx, cfg.Network, cfg.Addr)
	if err != nil {
		cancel()
		return nil, err
	}
	s.addr = addrPortOf(s.pc.LocalAddr())
	s.tr = &quic.Transport{Conn: s.pc, ConnectionIDLength: quicConnIDLen, VerifySourceAddress: func(a net.Addr) bool {
		return s.pre.pressured(sourceOfNet(a))
	}}
	// Early: the connection joins the pre-auth table when its first
	// flight is answered, so its handshake counts against the bounds too.
	s.ql, err = s.tr.ListenEarly(s.quicTLS, s.quicConfig())
	if err == nil && cfg.Registerer != nil {
		if err = cfg.Registerer.Register(collector{&s.m}); err != nil {
			_ = s.ql.Close()
			err = fmt.Errorf("relay: register metrics: %w", err)
		}
	}
	if err != nil {
		cancel()
		_ = s.tr.Close()
		_ = s.pc.Close()
		_ = s.tl.Close()
		return nil, fmt.Errorf("relay: listen quic %s: %w", cfg.Addr, err)
	}
	s.wg.Add(2)
	go s.acceptQUIC()
	go s.acceptTCP()
	s.log.Info("relay listening", "addr", s.addr, "fingerprint", fp)
	return s, nil
}

// handshakeTLS returns tc for one transport's handshakes, checking first
// that the ClientHello offers LRP's ALPN. crypto/tls refuses a client that
// offers only other protocols (no_application_protocol) but lets one that
// offers none through, except under QUIC (RFC 9001 §8.1); LRP requires the
// ALPN on TCP too (docs/LRP.md), so on TCP the check refuses an empty offer
// itself (crypto/tls then sends internal_error). A refusal is counted
// (reason alpn): on QUIC here, as the connection never reaches Accept; on
// TCP when its handshake fails (tcpConn). On TCP the check also lifts the
// deadline that bounded the wait for the ClientHello (HelloTimeout):
// AuthTimeout bounds the rest of the handshake. A config that tc's own
// GetConfigForClient returns gets the overrides tc got (enforceLRP).
func (s *Server) handshakeTLS(tc *tls.Config, tcp bool) *tls.Config {
	out := tc.Clone()
	next := tc.GetConfigForClient
	out.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		if tcp {
			_ = hi.Conn.SetReadDeadline(time.Time{})
		}
		if !slices.Contains(hi.SupportedProtos, ALPN) {
			if !tcp {
				s.m.authFail(authALPN)
			} else if c, ok := hi.Conn.(*tcpConn); ok {
				c.noALPN = true
			}
			if len(hi.SupportedProtos) == 0 {
				return nil, fmt.Errorf("relay: client offers no ALPN, want %q", ALPN)
			}
		}
		if next == nil {
			return nil, nil
		}
		// crypto/tls uses the config returned as it is: without this,
		// an operator's callback would decide ALPN and TLS version.
		c, err := next(hi)
		if c == nil || err != nil {
			return c, err
		}
		c = c.Clone()
		enforceLRP(c)
		return c, nil
	}
	return out
}

// tcpConn is a TCP connection in its TLS handshake.
type tcpConn struct {
	net.Conn
	noALPN bool // its ClientHello did not offer ALPN; set by the handshake
}

func (s *Server) quicConfig() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:  s.cfg.AuthTimeout,
		MaxIdleTimeout:        idleIntervals * s.cfg.KeepAlive,
		InitialPacketSize:     quicPacketSize,
		EnableDatagrams:       true,
		MaxIncomingStreams:    1, // the control stream
		MaxIncomingUniStreams: -1,
	}
}

// listenPair binds UDP and then TCP on the port UDP got; with port 0 it
// retries when another socket holds that port for TCP.
func listenPair(ctx context.Context, n netx.Network, addr string) (net.PacketConn, net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("relay: listen address %q: %w", addr, err)
	}
	const attempts = 10
	var lastErr error
	for range attempts {
		pc, err := n.ListenPacket(ctx, "udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("relay: listen udp %s: %w", addr, err)
		}
		tcpAddr := net.JoinHostPort(host, strconv.Itoa(int(addrPortOf(pc.LocalAddr()).Port())))
		l, err := n.Listen(ctx, "tcp", tcpAddr)
		if err == nil {
			return pc, l, nil
		}
		_ = pc.Close()
		lastErr = fmt.Errorf("relay: listen tcp %s: %w", tcpAddr, err)
		if port != "0" {
			break
		}
	}
	return nil, nil, lastErr
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if ua, ok := a.(*net.UDPAddr); ok {
		ap := ua.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// Addr returns the address both listeners are bound to.
func (s *Server) Addr() netip.AddrPort { return s.addr }

// Fingerprint returns the fingerprint of the server's certificate (see
// CertFingerprint) for clients to pin, or "" when the TLS configuration
// picks certificates per handshake.
func (s *Server) Fingerprint() string { return s.fp }

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() Stats { return s.m.snapshot() }

// Close stops listening, closes every client connection (telling each
// client the relay is shutting down) and returns when every goroutine the
// server started has returned. Idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cancel() // aborts handshakes; running connections fail themselves
		errQL := s.ql.Close()
		errTL := s.tl.Close()
		s.wg.Wait()
		errTR := s.tr.Close()
		errPC := s.pc.Close()
		if s.cfg.Registerer != nil {
			s.cfg.Registerer.Unregister(collector{&s.m})
		}
		if err := errors.Join(errQL, errTL, errTR, errPC); err != nil {
			s.closeErr = fmt.Errorf("relay: close: %w", err)
		}
		s.log.Info("relay closed")
	})
	return s.closeErr
}

func (s *Server) acceptTCP() {
	defer s.wg.Done()
	var delay time.Duration
	for {
		nc, err := s.tl.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off as
			// net/http does instead of spinning.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("accept tcp", "err", err, "retry", delay)
			select {
			case <-time.After(delay):
			case <-s.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		e := s.admit(nc.RemoteAddr(), func() { _ = nc.Close() })
		if e == nil {
			_ = nc.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveTCP(nc, e)
		}()
	}
}

func (s *Server) acceptQUIC() {
	defer s.wg.Done()
	for {
		qc, err := s.ql.Accept(s.ctx)
		if err != nil {
			return // listener closed or server closing
		}
		busy := func() {
			_ = qc.CloseWithError(quic.ApplicationErrorCode(CloseServerFull), "too many connections authenticating")
		}
		e := s.admit(qc.RemoteAddr(), busy)
		if e == nil {
			busy()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveQUIC(qc, e)
		}()
	}
}

// admit enters a new connection in the pre-auth table and closes the
// connections it evicted. A nil entry means the table refused it: the
// caller closes it.
func (s *Server) admit(remote net.Addr, evict func()) *pending {
	e, out, perSource := s.pre.admit(sourceOfNet(remote), time.Now(), evict)
	if e == nil {
		s.countBusy(perSource)
		return nil
	}
	for _, v := range out {
		s.countBusy(v.perSource)
		v.victim.evict()
	}
	return e
}

func (s *Server) countBusy(perSource bool) {
	if perSource {
		s.m.authFail(authBusySource)
	} else {
		s.m.authFail(authBusy)
	}
}

func (s *Server) lookup(k key.Public) *sconn {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.clients[k]
}

// register adds c, replacing (and closing) an older connection of the
// same key, whose senders c inherits. It refuses when the server is
// closing or full.
func (s *Server) register(c *sconn) (CloseCode, string, bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return CloseNormal, "relay shutting down", false
	}
	old := s.clients[c.key]
	if old == nil && len(s.clients) >= s.cfg.MaxClients {
		s.mu.Unlock()
		return CloseServerFull, fmt.Sprintf("relay full (%d clients)", s.cfg.MaxClients), false
	}
	s.clients[c.key] = c
	if old != nil {
		// Read loops that cached the route to old look it up again from
		// now on. Its teardown can take closeWriteTimeout (its writer
		// stuck on a dead path, the usual reason for the reconnect), and
		// a packet queued to it meanwhile would be lost.
		old.closed.Store(true)
	}
	s.mu.Unlock()
	s.m.clientUp(c.w.transport)
	if old != nil {
		// Whoever sent to the key is told when it leaves, whichever of
		// its connections that is.
		for _, k := range old.takeSenders() {
			c.addSender(k)
		}
		old.w.fail(CloseReplaced, "another connection registered this key", nil, false)
	}
	return 0, "", true
}

// unregister removes c unless a newer connection replaced it, and then
// tells everyone who sent to c that it is gone.
func (s *Server) unregister(c *sconn) {
	c.closed.Store(true)
	s.mu.Lock()
	current := s.clients[c.key] == c
	if current {
		delete(s.clients, c.key)
	}
	s.mu.Unlock()
	s.m.clientDown(c.w.transport)
	if current {
		for _, k := range c.takeSenders() {
			if d := s.lookup(k); d != nil {
				d.notifyGone(c.key, GoneDisconnected)
			}
		}
	}
	c.sendq.discard()
}
