package stun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/pion/stun/v4"

	"github.com/latticelab/lattice/netx"
)

// DefaultSoftware is the SOFTWARE attribute a server sends by default.
const DefaultSoftware = "lattice"

// maxSoftware is the longest SOFTWARE value RFC 8489 section 14.14 allows.
const maxSoftware = 763

// ephemeralAttempts bounds the retries when the network picks the ports of
// an RFC 5780 server: a port free on one address may be taken on the other.
const ephemeralAttempts = 8

// Config configures a Server. Network and Primary are required; every other
// field has a working zero value.
type Config struct {
	// Network is where the server listens. Required: a STUN server that
	// fell back to the OS network would escape a lab topology unnoticed.
	Network netx.Network
	// Logger receives the server's logs, with component=stun. If nil, logs
	// are discarded. Nothing is logged per packet; see Stats.
	Logger *slog.Logger
	// Primary is the address and port to listen on. Required. An
	// unspecified address (0.0.0.0, ::) listens on every address, which is
	// allowed only without Alternate. Port 0 lets the network pick one;
	// Server.Addr reports it.
	Primary netip.AddrPort
	// Alternate, if set, is a second address and a second port of the same
	// family: the server then listens on all four combinations of
	// {Primary, Alternate} address × {Primary, Alternate} port and serves
	// RFC 5780 (OTHER-ADDRESS, RESPONSE-ORIGIN, CHANGE-REQUEST). Both
	// addresses must be specific, since clients are told to use them.
	// Port 0 in either lets the network pick. If zero, plain RFC 8489.
	Alternate netip.AddrPort
	// Software is the SOFTWARE attribute of every response whose request
	// left room for it. If empty, DefaultSoftware. At most 763 bytes.
	Software string
}

// Server is a STUN server (see the package documentation). Build it with
// NewServer, run it with Start or Serve, stop it with Close.
type Server struct {
	cfg Config
	log *slog.Logger
	h   handler
	c   counters

	// ctx is cancelled by Close: it aborts a Start in progress and
	// tells the read loops that their read errors are the shutdown.
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex // guards the following fields
	started bool
	closed  bool
	// conns are the sockets indexed by sock; nil where unused. Set once
	// by Start before the read loops begin, read-only afterwards.
	conns [4]net.PacketConn
}

// NewServer validates cfg and returns a server that is not yet listening.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Network == nil {
		return nil, fmt.Errorf("%w: Network is required", ErrInvalidConfig)
	}
	if !cfg.Primary.IsValid() {
		return nil, fmt.Errorf("%w: Primary is required (there is no default listen address)", ErrInvalidConfig)
	}
	cfg.Primary = unmap(cfg.Primary)
	if cfg.Alternate.IsValid() {
		cfg.Alternate = unmap(cfg.Alternate)
		p, a := cfg.Primary, cfg.Alternate
		switch {
		case p.Addr().Is4() != a.Addr().Is4():
			return nil, fmt.Errorf("%w: Primary %v and Alternate %v are of different address families", ErrInvalidConfig, p, a)
		case p.Addr().IsUnspecified() || a.Addr().IsUnspecified():
			return nil, fmt.Errorf("%w: RFC 5780 mode needs specific addresses, got Primary %v and Alternate %v", ErrInvalidConfig, p, a)
		case p.Addr() == a.Addr():
			return nil, fmt.Errorf("%w: Alternate %v has the same address as Primary", ErrInvalidConfig, a)
		case p.Port() != 0 && p.Port() == a.Port():
			return nil, fmt.Errorf("%w: Alternate %v has the same port as Primary", ErrInvalidConfig, a)
		}
	}
	if cfg.Software == "" {
		cfg.Software = DefaultSoftware
	}
	if len(cfg.Software) > maxSoftware {
		return nil, fmt.Errorf("%w: Software is %d bytes, more than %d", ErrInvalidConfig, len(cfg.Software), maxSoftware)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{cfg: cfg, log: log.With("component", "stun")}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.h = handler{
		software: stun.NewSoftware(cfg.Software),
		rfc5780:  cfg.Alternate.IsValid(),
		stats:    &s.c,
	}
	s.h.local[0] = cfg.Primary
	if s.h.rfc5780 {
		s.h.local = endpoints(cfg.Primary, cfg.Alternate)
	}
	return s, nil
}

// endpoints lays out the four RFC 5780 endpoints, indexed by sock.
func endpoints(p, a netip.AddrPort) [4]netip.AddrPort {
	var e [4]netip.AddrPort
	for i := range e {
		addr, port := p.Addr(), p.Port()
		if sock(i)&altAddr != 0 {
			addr = a.Addr()
		}
		if sock(i)&altPort != 0 {
			port = a.Port()
		}
		e[i] = netip.AddrPortFrom(addr, port)
	}
	return e
}

// Start opens the server's sockets and serves on them until Close. ctx
// bounds the opening only. A server starts at most once; Start after
// Close returns ErrClosed.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrClosed
	case s.started:
		s.mu.Unlock()
		return errors.New("stun: server already started")
	}
	s.started = true
	s.mu.Unlock()

	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	conns, local, err := s.listen(lctx)
	if err != nil {
		return fmt.Errorf("stun: start: %w", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		closeAll(conns)
		return ErrClosed
	}
	s.conns = conns
	s.h.local = local
	for i, c := range conns {
		if c == nil {
			continue
		}
		s.wg.Add(1)
		go s.serve(sock(i), c)
	}
	if s.h.rfc5780 {
		s.log.Info("serving STUN with RFC 5780", "primary", local[0], "other", local[altAddr|altPort])
	} else {
		s.log.Info("serving STUN", "addr", local[0])
	}
	return nil
}

// Serve starts the server and serves until ctx is done or Close is called,
// then closes it. It returns Start's error, or Close's (normally nil).
func (s *Server) Serve(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-s.ctx.Done():
	}
	return s.Close()
}

// Close stops the server: it closes the sockets and waits for the read
// loops to return. It is idempotent and returns the first call's error.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		conns := s.conns
		s.mu.Unlock()
		s.cancel()
		var errs []error
		for _, c := range conns {
			if c == nil {
				continue
			}
			if err := c.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		s.wg.Wait()
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("stun: close: %w", err)
		}
		s.log.Debug("stopped")
	})
	return s.closeErr
}

// Addr returns the primary endpoint, with the port the network chose when
// Config.Primary's was zero (once Start has returned).
func (s *Server) Addr() netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h.local[0]
}

// OtherAddr returns the alternate address with the alternate port: what
// OTHER-ADDRESS tells clients of the primary endpoint. It is zero for a
// plain RFC 8489 server.
func (s *Server) OtherAddr() netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.h.rfc5780 {
		return netip.AddrPort{}
	}
	return s.h.local[altAddr|altPort]
}

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() Stats { return s.c.snapshot() }

// listen opens the sockets: one for a plain server, four in RFC 5780 mode.
func (s *Server) listen(ctx context.Context) ([4]net.PacketConn, [4]netip.AddrPort, error) {
	var (
		conns [4]net.PacketConn
		local [4]netip.AddrPort
	)
	network := "udp6"
	if s.cfg.Primary.Addr().Is4() {
		network = "udp4"
	}
	if !s.h.rfc5780 {
		c, ap, err := s.listenOne(ctx, network, s.cfg.Primary)
		if err != nil {
			return conns, local, err
		}
		conns[0], local[0] = c, ap
		return conns, local, nil
	}
	attempts := 1
	if s.cfg.Primary.Port() == 0 || s.cfg.Alternate.Port() == 0 {
		attempts = ephemeralAttempts
	}
	var err error
	for range attempts {
		conns, local, err = s.listenFour(ctx, network)
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	return conns, local, err
}

// listenFour opens the primary and the alternate endpoint first, so that
// ports the network picks are known, then the two crossed combinations.
func (s *Server) listenFour(ctx context.Context, network string) (conns [4]net.PacketConn, local [4]netip.AddrPort, err error) {
	defer func() {
		if err != nil {
			closeAll(conns)
		}
	}()
	p, a := s.cfg.Primary, s.cfg.Alternate
	if conns[0], p, err = s.listenOne(ctx, network, p); err != nil {
		return conns, local, err
	}
	last := altAddr | altPort
	if conns[last], a, err = s.listenOne(ctx, network, a); err != nil {
		return conns, local, err
	}
	if p.Port() == a.Port() {
		return conns, local, fmt.Errorf("listen: the network gave %v and %v the same port", p, a)
	}
	local = endpoints(p, a)
	for _, i := range []sock{altAddr, altPort} {
		if conns[i], _, err = s.listenOne(ctx, network, local[i]); err != nil {
			return conns, local, err
		}
	}
	return conns, local, nil
}

// listenOne opens one socket and returns it with its actual endpoint.
func (s *Server) listenOne(ctx context.Context, network string, ap netip.AddrPort) (net.PacketConn, netip.AddrPort, error) {
	c, err := s.cfg.Network.ListenPacket(ctx, network, ap.String())
	if err != nil {
		return nil, ap, fmt.Errorf("listen %s %v: %w", network, ap, err)
	}
	if ap.Port() == 0 {
		bound, ok := addrPortOf(c.LocalAddr())
		if !ok {
			_ = c.Close()
			return nil, ap, fmt.Errorf("listen %s %v: unusable local address %v", network, ap, c.LocalAddr())
		}
		ap = netip.AddrPortFrom(ap.Addr(), bound.Port())
	}
	return c, ap, nil
}

// udpAddrPortConn is what *net.UDPConn offers beyond net.PacketConn: reads
// and writes without allocating a net.Addr per datagram.
type udpAddrPortConn interface {
	ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error)
	WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error)
}

// serve is the read loop of socket at.
func (s *Server) serve(at sock, c net.PacketConn) {
	defer s.wg.Done()
	sc := newScratch()
	// One byte more than accepted, so an oversize datagram is seen as such
	// even where the network truncates silently.
	buf := make([]byte, maxDatagram+1)
	fast, _ := c.(udpAddrPortConn)
	var backoff time.Duration
	for {
		var (
			n    int
			src  netip.AddrPort
			from net.Addr
			err  error
		)
		if fast != nil {
			n, src, err = fast.ReadFromUDPAddrPort(buf)
		} else {
			n, from, err = c.ReadFrom(buf)
		}
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			s.c.readErrors.Add(1)
			if !s.pause(&backoff) {
				return
			}
			continue
		}
		backoff = 0
		if from != nil {
			src, _ = addrPortOf(from) // invalid src: handle drops it
		}
		out, via, ok := s.h.handle(sc, buf[:n], src, at)
		if !ok {
			continue
		}
		if sc.dst != src {
			from = nil // RESPONSE-PORT: not where the request came from
		}
		if err := s.send(via, out, sc.dst, from); err != nil {
			s.c.sendErrors.Add(1)
		}
	}
}

// send writes a response from socket via to the requester, reusing the
// net.Addr the network handed out when there is one.
func (s *Server) send(via sock, out []byte, dst netip.AddrPort, from net.Addr) error {
	c := s.conns[via]
	var err error
	switch fast, ok := c.(udpAddrPortConn); {
	case ok:
		_, err = fast.WriteToUDPAddrPort(out, dst)
	case from != nil:
		_, err = c.WriteTo(out, from)
	default:
		_, err = c.WriteTo(out, net.UDPAddrFromAddrPort(unmap(dst)))
	}
	return err
}

// pause waits after a read error that is not the shutdown, doubling from
// 1ms to 1s so a persistently failing socket does not spin. It returns
// false when the server is closing.
func (s *Server) pause(d *time.Duration) bool {
	*d = min(max(2**d, time.Millisecond), time.Second)
	if *d == time.Second {
		s.log.Warn("reads keep failing", "reads_failed", s.c.readErrors.Load())
	}
	t := time.NewTimer(*d)
	defer t.Stop()
	select {
	case <-s.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func closeAll(conns [4]net.PacketConn) {
	for _, c := range conns {
		if c != nil {
			_ = c.Close()
		}
	}
}

// addrPortOf converts the address of a UDP socket or datagram.
func addrPortOf(a net.Addr) (netip.AddrPort, bool) {
	if ua, ok := a.(*net.UDPAddr); ok {
		ap := ua.AddrPort()
		return unmap(ap), ap.IsValid()
	}
	if a == nil {
		return netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(a.String())
	return unmap(ap), err == nil
}

func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
