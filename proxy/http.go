package proxy

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HTTP proxy limits.
const (
	// maxHeaderBytes bounds a client's request header (net/http adds 4 KiB
	// of slack); longer ones get 431.
	maxHeaderBytes = 64 << 10
	// maxResponseHeaderBytes bounds a destination's response header.
	maxResponseHeaderBytes = 1 << 20
	// httpIdleTimeout closes a client's keep-alive connection that sends
	// no new request, so idle clients do not hold MaxConns slots forever.
	httpIdleTimeout = 2 * time.Minute
	// proxyRealm is the Basic realm of 407 challenges.
	proxyRealm = `Basic realm="lattice"`
)

// connKey is the request context key of the client's net.Conn.
type connKey struct{}

// NewHTTP returns an HTTP proxy: CONNECT tunnels (RFC 9110 §9.3.6) and
// forwarding of absolute-form http:// requests (RFC 9112 §3.2.2), the two
// ways clients use a proxy named in HTTP_PROXY and HTTPS_PROXY.
//
// Forwarded requests lose their hop-by-hop headers (RFC 9110 §7.6.1,
// Proxy-Authorization among them) and each one is sent on a fresh
// connection from the Dialer, so the policy sees, and Event reports, every
// request; connections are not pooled across requests or clients.
func NewHTTP(cfg Config) (*Server, error) {
	s, err := newServer(cfg, "http")
	if err != nil {
		return nil, err
	}
	errLog := slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)
	s.tr = &http.Transport{
		Proxy:                  nil, // never a proxy from the environment
		DialContext:            s.transportDial,
		DisableKeepAlives:      true,
		DisableCompression:     true, // pass Accept-Encoding and bodies through untouched
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		ExpectContinueTimeout:  time.Second,
	}
	s.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// RFC 9112 §3.2.2: the absolute-form target, not the Host
			// header, names the destination; the Host header follows it.
			pr.Out.Host = ""
			pr.Out.URL.User = nil
		},
		Transport:     s.tr,
		FlushInterval: -1, // stream: agents read server-sent events and long polls
		ErrorLog:      errLog,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			httpError(w, err)
		},
	}
	s.httpSrv = &http.Server{
		Handler:                      httpHandler{s},
		ReadHeaderTimeout:            s.cfg.HandshakeTimeout,
		IdleTimeout:                  httpIdleTimeout,
		MaxHeaderBytes:               maxHeaderBytes,
		DisableGeneralOptionsHandler: true, // "OPTIONS *" is not a proxy request: 400
		ErrorLog:                     errLog,
		BaseContext:                  func(net.Listener) context.Context { return s.ctx },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ConnState: s.connState,
	}
	return s, nil
}

// connState frees a client's MaxConns slot when net/http closes it. A
// hijacked connection stays counted until the handler that took it
// returns (see httpHandler.ServeHTTP).
func (s *Server) connState(c net.Conn, state http.ConnState) {
	switch state {
	case http.StateHijacked:
		s.mu.Lock()
		if _, ok := s.clients[c]; ok {
			s.clients[c] = true
		}
		s.mu.Unlock()
	case http.StateClosed:
		s.release(c)
	}
}

// httpHandler serves the HTTP proxy's requests.
type httpHandler struct{ s *Server }

var _ http.Handler = httpHandler{}

func (h httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	if !s.enter() {
		http.Error(w, ErrClosed.Error(), http.StatusServiceUnavailable)
		return
	}
	defer s.wg.Done()
	conn, _ := r.Context().Value(connKey{}).(net.Conn)
	defer func() {
		s.mu.Lock()
		hijacked := s.clients[conn]
		s.mu.Unlock()
		if hijacked {
			s.release(conn)
		}
	}()
	var client net.Addr
	if conn != nil {
		client = conn.RemoteAddr()
	}
	if !s.authorized(r, client) {
		w.Header().Set("Proxy-Authenticate", proxyRealm)
		http.Error(w, "proxy authentication required", http.StatusProxyAuthRequired)
		return
	}
	if r.Method == http.MethodConnect {
		s.tunnel(w, r, client)
		return
	}
	s.forward(w, r, client)
}

// authorized checks Proxy-Authorization: Basic against the credentials.
func (s *Server) authorized(r *http.Request, client net.Addr) bool {
	if s.auth == nil {
		return true
	}
	h := r.Header.Get("Proxy-Authorization")
	if h == "" {
		s.loginFailed(client, "", ReasonNoCredentials)
		return false
	}
	scheme, cred, _ := strings.Cut(h, " ")
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	user, pass, ok := strings.Cut(string(raw), ":")
	if !strings.EqualFold(scheme, "Basic") || err != nil || !ok {
		// Log nothing of the value: it may hold a password in any form.
		s.loginFailed(client, "", ReasonMalformed)
		return false
	}
	if !s.auth.match([]byte(user), []byte(pass)) {
		s.loginFailed(client, user, ReasonBadCredentials)
		return false
	}
	return true
}

// tunnel serves CONNECT: dial, answer 200, then splice the hijacked
// connection, bytes the client sent early included.
func (s *Server) tunnel(w http.ResponseWriter, r *http.Request, client net.Addr) {
	host, port, err := net.SplitHostPort(r.URL.Host)
	var dst addr
	if err == nil {
		dst, err = target(host, port)
	}
	if err != nil || r.URL.Path != "" {
		s.report(client, "tcp", r.URL.Host, fmt.Errorf("%w: CONNECT %q", errBadHost, r.RequestURI))
		http.Error(w, fmt.Sprintf("proxy: bad CONNECT target %q", r.RequestURI), http.StatusBadRequest)
		return
	}
	up, err := s.dial(r.Context(), client, "tcp", dst.String())
	if err != nil {
		httpError(w, err)
		return
	}
	if !s.track(up) {
		_ = up.Close()
		http.Error(w, ErrClosed.Error(), http.StatusServiceUnavailable)
		return
	}
	defer s.untrack(up)
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = up.Close()
		http.Error(w, "proxy: cannot tunnel on this connection", http.StatusInternalServerError)
		return
	}
	_ = c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	_, err = io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	if n := brw.Reader.Buffered(); err == nil && n > 0 {
		early, _ := brw.Reader.Peek(n)
		_, err = up.Write(early)
	}
	if err != nil {
		_ = c.Close()
		_ = up.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	Splice(c, up)
}

// forward proxies an absolute-form http:// request.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, client net.Addr) {
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "proxy: only CONNECT and absolute http:// requests are proxied", http.StatusBadRequest)
		return
	}
	dst, err := target(r.URL.Hostname(), cmp.Or(r.URL.Port(), "80"))
	if err != nil {
		s.report(client, "tcp", r.URL.Host, err)
		http.Error(w, fmt.Sprintf("proxy: bad host %q", r.URL.Host), http.StatusBadRequest)
		return
	}
	// The Transport dials URL.Host (with port 80 added) and writes it as
	// the Host header: normalised, and without a port the client left out.
	if r.URL.Port() == "" {
		r.URL.Host = dst.urlHost()
	} else {
		r.URL.Host = dst.String()
	}
	s.rp.ServeHTTP(w, r)
}

// target validates and normalises a destination host (see parseHost) and
// decimal port.
func target(host, port string) (addr, error) {
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return addr{}, fmt.Errorf("%w: port %q", errBadHost, port)
	}
	ip, name, err := parseHost(host)
	if err != nil {
		return addr{}, err
	}
	return addr{ip: ip, name: name, port: uint16(p)}, nil
}

// httpError answers a failed dial: 403 with the reason for a policy
// refusal, 504 for a timeout, 502 otherwise.
func httpError(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	switch {
	case errors.Is(err, ErrDenied):
		code = http.StatusForbidden
	case isTimeout(err):
		code = http.StatusGatewayTimeout
	}
	http.Error(w, err.Error(), code)
}

// transportDial is the forwarding Transport's DialContext: the Dialer,
// reported against the client whose request it serves, and tracked so
// Close closes it.
func (s *Server) transportDial(ctx context.Context, network, address string) (net.Conn, error) {
	if !s.enter() {
		return nil, ErrClosed
	}
	defer s.wg.Done()
	var client net.Addr
	if c, ok := ctx.Value(connKey{}).(net.Conn); ok {
		client = c.RemoteAddr()
	}
	c, err := s.dial(ctx, client, network, address)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, s: s}
	if !s.track(tc) {
		_ = c.Close()
		return nil, ErrClosed
	}
	return tc, nil
}

// trackedConn is an upstream connection the Transport owns: closing it
// removes it from the server's set.
type trackedConn struct {
	net.Conn
	s    *Server
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.s.untrack(c) })
	return err
}
