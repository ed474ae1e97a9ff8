package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"
)

// Server is a SOCKS5 or HTTP proxy (NewSOCKS5, NewHTTP) serving any number
// of listeners until Close.
type Server struct {
	cfg     Config
	log     *slog.Logger
	auth    *authenticator // nil: no authentication
	udpIdle time.Duration  // idle lifetime of a UDP destination; tests shorten it

	// HTTP proxy only; nil for SOCKS5.
	httpSrv *http.Server
	rp      *httputil.ReverseProxy
	tr      *http.Transport

	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup // every goroutine the server starts or hosts
	closeOnce sync.Once

	mu        sync.Mutex // guards the following
	closed    bool
	listeners map[net.Listener]struct{}
	clients   map[net.Conn]bool      // admitted client connections; true once hijacked from net/http
	conns     map[io.Closer]struct{} // upstream connections and UDP relay sockets
}

func newServer(cfg Config, proto string) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "proxy", "proto", proto),
		auth:      newAuthenticator(cfg.Credentials),
		udpIdle:   defaultUDPIdle,
		ctx:       ctx,
		cancel:    cancel,
		listeners: make(map[net.Listener]struct{}),
		clients:   make(map[net.Conn]bool),
		conns:     make(map[io.Closer]struct{}),
	}, nil
}

// Serve accepts clients on ln until ln fails or Close is called, and
// closes ln before returning. It may be called for several listeners at
// once. It returns ErrClosed after Close, otherwise the error of ln.Accept.
//
// The caller picks the listener and so the exposure: bind 127.0.0.1 (or an
// address only the sandbox reaches), never an unspecified address.
func (s *Server) Serve(ln net.Listener) error {
	if !s.addListener(ln) {
		_ = ln.Close()
		return ErrClosed
	}
	defer s.removeListener(ln)
	if s.httpSrv != nil {
		err := s.httpSrv.Serve(&limitListener{Listener: ln, s: s})
		if errors.Is(err, http.ErrServerClosed) || s.isClosed() {
			return ErrClosed
		}
		return fmt.Errorf("proxy: serve: %w", err)
	}
	return s.acceptLoop(ln)
}

// acceptLoop serves each admitted SOCKS5 client on its own goroutine,
// backing off on temporary Accept errors as net/http does.
func (s *Server) acceptLoop(ln net.Listener) error {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrClosed
			}
			if !isTemporaryAccept(err) {
				return fmt.Errorf("proxy: accept: %w", err)
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Debug("accept failed, retrying", "err", err, "delay", delay)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
				return ErrClosed
			}
			continue
		}
		delay = 0
		if !s.admit(c) {
			continue
		}
		if !s.goroutine(func() {
			defer s.release(c)
			s.serveSOCKS(c)
		}) {
			s.release(c)
		}
	}
}

// Close stops every listener, closes every client and upstream connection
// and waits for all goroutines the server started. It is idempotent and
// always returns nil.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		closers := make([]io.Closer, 0, len(s.listeners)+len(s.clients)+len(s.conns))
		for ln := range s.listeners {
			closers = append(closers, ln)
		}
		for c := range s.clients {
			closers = append(closers, c)
		}
		for c := range s.conns {
			closers = append(closers, c)
		}
		s.mu.Unlock()

		s.cancel()
		if s.httpSrv != nil {
			_ = s.httpSrv.Close()
		}
		for _, c := range closers {
			_ = c.Close()
		}
		if s.tr != nil {
			s.tr.CloseIdleConnections()
		}
		s.wg.Wait()
	})
	return nil
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) addListener(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.listeners[ln] = struct{}{}
	return true
}

func (s *Server) removeListener(ln net.Listener) {
	s.mu.Lock()
	delete(s.listeners, ln)
	s.mu.Unlock()
	_ = ln.Close()
}

// admit registers a new client connection, or closes it when the server is
// closed or MaxConns are already connected.
func (s *Server) admit(c net.Conn) bool {
	s.mu.Lock()
	ok := !s.closed && len(s.clients) < s.cfg.MaxConns
	if ok {
		s.clients[c] = false
	}
	s.mu.Unlock()
	if !ok {
		s.log.Debug("client refused: connection limit or closed", "client", c.RemoteAddr(), "max", s.cfg.MaxConns)
		_ = c.Close()
	}
	return ok
}

// release closes a client connection and frees its MaxConns slot.
func (s *Server) release(c net.Conn) {
	_ = c.Close()
	s.mu.Lock()
	delete(s.clients, c)
	s.mu.Unlock()
}

// goroutine runs f on a new goroutine that Close waits for, unless Close
// has begun.
func (s *Server) goroutine(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Go(f)
	return true
}

// enter counts the calling goroutine (one net/http started) in what Close
// waits for; the caller must call s.wg.Done when enter returns true.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// track registers an upstream connection or relay socket for Close to
// close; when Close has begun it returns false and the caller closes c.
func (s *Server) track(c io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c io.Closer) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// dial calls the Dialer with the configured timeout, cancelled by Close,
// then reports the attempt to Event and the log.
func (s *Server) dial(ctx context.Context, client net.Addr, network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	c, err := s.cfg.Dial(ctx, network, address)
	switch {
	case err != nil && c != nil:
		_ = c.Close()
	case err == nil && c == nil:
		err = errors.New("proxy: dialer returned no connection")
	}
	s.report(client, network, address, err)
	if err != nil {
		return nil, fmt.Errorf("proxy: dial %s %s: %w", network, address, err)
	}
	return c, nil
}

// report passes an attempt to Event and logs failures.
func (s *Server) report(client net.Addr, network, address string, err error) {
	if s.cfg.Event != nil {
		s.cfg.Event(Attempt{Client: client, Network: network, Address: address, Err: err})
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrDenied):
		s.log.Info("destination denied", "client", client, "network", network, "dst", address, "err", err)
	default:
		s.log.Debug("dial failed", "client", client, "network", network, "dst", address, "err", err)
	}
}

// loginFailed reports a refused login to LoginFailed and the log.
func (s *Server) loginFailed(client net.Addr, user, reason string) {
	if s.cfg.LoginFailed != nil {
		s.cfg.LoginFailed(LoginFailure{Client: client, Username: user, Reason: reason})
	}
	msg, level := "socks5 authentication refused", slog.LevelInfo
	if s.httpSrv != nil {
		msg = "http proxy authentication refused"
		if reason == ReasonNoCredentials {
			// The 407 challenge is how most HTTP clients learn they must
			// authenticate: audited, but not worth an Info line each.
			level = slog.LevelDebug
		}
	}
	s.log.Log(s.ctx, level, msg, "client", client, "user", user, "reason", reason)
}

// limitListener admits the HTTP server's connections like acceptLoop does
// for SOCKS5; net/http does its own backoff on Accept errors.
type limitListener struct {
	net.Listener
	s *Server
}

var _ net.Listener = (*limitListener)(nil)

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.s.admit(c) {
			return c, nil
		}
	}
}
