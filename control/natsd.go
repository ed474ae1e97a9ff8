package control

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/netx"
)

// EmbeddedNATS is a nats-server running in this process. It listens on a
// netx.Network: each accepted connection is bridged to the server's
// in-process connection, so it works the same on real sockets and on a lab
// host. Clients authenticate as control, as a joining node (user
// "join.<random>", any password), or as a registered node (user its node
// ID, password its secret); each gets only the permissions its role needs.
//
// A joining client is let in without a token check: it may only publish
// registration requests and read its own inbox, and control judges each
// request (a join token, or a known identity's proof of key). Checking the
// token at login would refuse a known node whose token expired, and would
// refuse a new one with no reason given (NATS's authorization failure
// carries none), where control can say the token expired and when.
//
// With TLS, every accepted connection must open with a TLS handshake (as
// nats.go's TLSHandshakeFirst does); the listener terminates it and the
// server sees the plaintext inside. A client that speaks plain NATS is
// dropped, so no secret it sends is ever read.
type EmbeddedNATS struct {
	srv  *server.Server
	ln   net.Listener
	log  *slog.Logger
	auth *authenticator
	tls  *tls.Config // nil: plaintext
	wg   sync.WaitGroup

	mu     sync.Mutex // guards the following fields
	conns  map[net.Conn]struct{}
	closed bool
}

// EmbeddedNATSConfig configures EmbeddedNATS.
type EmbeddedNATSConfig struct {
	// Network to listen on. If nil, netx.OS.
	Network netx.Network
	// Listen is the client address. If empty, 127.0.0.1:4222.
	Listen string
	// StoreDir enables JetStream (for the KV registry) with its files
	// there. If empty, JetStream is off.
	StoreDir string
	// TLS is the certificate the listener presents. If nil, Config.TLS;
	// if both are nil, plaintext.
	TLS    *tls.Config
	Logger *slog.Logger
	// ServerName names this server; in a cluster each needs its own (for
	// JetStream). If empty, "lattice-control".
	ServerName string
	// Cluster makes this server one of a NATS cluster (for a few control
	// replicas without a NATS of their own). If nil, it stands alone.
	Cluster *NATSCluster
}

// NATSCluster is the embedded server's part in a NATS cluster.
type NATSCluster struct {
	// Name of the cluster. If empty, "lattice".
	Name string
	// Listen is the route address, host:port. Required.
	Listen string
	// Routes are the other servers' route URLs, nats-route://HOST:PORT
	// (this server's own may be among them).
	Routes []string
	// Secret is the password every server of the cluster presents on its
	// routes (user RouteUser). Required unless Listen is on loopback:
	// routes carry every message, node passwords in registration answers
	// included.
	Secret string
}

// RouteUser is the user NATS cluster routes authenticate as.
const RouteUser = "lattice-route"

// clusterOptions configures opts for c.
func clusterOptions(opts *server.Options, c *NATSCluster) error {
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("cluster listen %q: %w", c.Listen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("cluster listen %q: bad port", c.Listen)
	}
	if c.Secret == "" && !controlapi.IsLoopbackHost(host) {
		return fmt.Errorf("cluster listen %s is not loopback: routes need a shared secret", c.Listen)
	}
	name := c.Name
	if name == "" {
		name = "lattice"
	}
	// NoAdvertise: nodes get the client URLs from control, with their
	// trust settings; servers' own gossip is not to be dialed.
	opts.Cluster = server.ClusterOpts{Name: name, Host: host, Port: p, NoAdvertise: true, Username: RouteUser, Password: c.Secret}
	if c.Secret == "" {
		opts.Cluster.Username = ""
	}
	for _, r := range c.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Host == "" || (u.Scheme != "nats-route" && u.Scheme != "nats") {
			return fmt.Errorf("cluster route %q: want nats-route://HOST:PORT", r)
		}
		if c.Secret != "" {
			u.User = url.UserPassword(RouteUser, c.Secret)
		}
		opts.Routes = append(opts.Routes, u)
	}
	return nil
}

// authenticator decides who may connect and with which permissions.
type authenticator struct {
	controlPass string
	secrets     func(id string) []byte // a node's secret hash, nil if unknown
}

const controlUser = "lattice-control"

// joinPrefix begins a joining client's NATS user, subjectNodes every
// node subject (controlapi's names, shortened for the server's code).
const (
	joinPrefix   = controlapi.JoinPrefix
	subjectNodes = controlapi.NodeSubjectPrefix
)

// Check implements server.Authentication.
func (a *authenticator) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	if o.Username == controlUser {
		if subtle.ConstantTimeCompare([]byte(o.Password), []byte(a.controlPass)) != 1 {
			return false
		}
		c.RegisterUser(&server.User{Username: controlUser}) // every permission
		return true
	}
	perms := a.decide(o.Username, o.Password)
	if perms == nil {
		return false
	}
	c.RegisterUser(&server.User{Username: o.Username, Permissions: perms})
	return true
}

// decide returns the permissions of a joining client or a registered
// node logging in as user with pass, nil to refuse it. It serves the
// embedded server (Check) and an external one (the auth callout).
func (a *authenticator) decide(user, pass string) *server.Permissions {
	if strings.HasPrefix(user, joinPrefix) {
		id := strings.TrimPrefix(user, joinPrefix)
		if !validInboxID(id) || len(pass) > controlapi.MaxTokenBytes {
			return nil
		}
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{controlapi.SubjectRegister, controlapi.SubjectServers}},
			Subscribe: &server.SubjectPermission{Allow: []string{controlapi.InboxPrefix + "." + user + ".>"}},
		}
	}
	if user == controlUser || user == "" {
		return nil
	}
	hash := a.secrets(user)
	sum := sha256.Sum256([]byte(pass))
	if hash == nil || subtle.ConstantTimeCompare(hash, sum[:]) != 1 {
		return nil
	}
	return nodePermissions(user)
}

// nodePermissions confine a node to its own subjects and inbox, and let
// it read the shared peer events (which carry nothing a peer list does
// not).
func nodePermissions(id string) *server.Permissions {
	own := subjectNodes + id + ".>"
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{own}},
		Subscribe: &server.SubjectPermission{Allow: []string{own, controlapi.InboxPrefix + "." + id + ".>", controlapi.SubjectPeerEvents}},
	}
}

// validInboxID accepts the random part of a joining client's user name.
func validInboxID(s string) bool {
	if len(s) < 16 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// startEmbeddedNATS starts the server and its listener.
func startEmbeddedNATS(ctx context.Context, cfg EmbeddedNATSConfig, auth *authenticator) (*EmbeddedNATS, error) {
	if cfg.Network == nil {
		cfg.Network = netx.OS
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:4222"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := cfg.ServerName
	if name == "" {
		name = "lattice-control"
	}
	opts := &server.Options{
		ServerName:                 name,
		DontListen:                 true,
		NoSigs:                     true,
		NoLog:                      true,
		MaxPayload:                 64 << 10,
		CustomClientAuthentication: auth,
	}
	if cfg.StoreDir != "" {
		opts.JetStream = true
		opts.StoreDir = cfg.StoreDir
	}
	if cfg.Cluster != nil {
		if err := clusterOptions(opts, cfg.Cluster); err != nil {
			return nil, fmt.Errorf("embedded NATS: %w", err)
		}
		// nats-server starts routing only after its own client listener:
		// give it one on a loopback port of its choosing (same
		// authenticator), besides the listener nodes use.
		opts.DontListen, opts.Host, opts.Port = false, "127.0.0.1", -1
		// nats-server reports a route listener it could not open only as
		// a server that never gets ready: try the address first, for an
		// error that says why.
		if opts.Cluster.Port > 0 {
			ln, err := net.Listen("tcp", cfg.Cluster.Listen)
			if err != nil {
				return nil, fmt.Errorf("embedded NATS: cluster listen: %w", err)
			}
			ln.Close()
		}
	}
	var tc *tls.Config
	if cfg.TLS != nil {
		var err error
		if tc, err = serverTLS(cfg.TLS); err != nil {
			return nil, fmt.Errorf("embedded NATS: %w", err)
		}
		// The listener terminates TLS; the server's own TLS configuration
		// only makes its INFO say TLS is available, which a TLS-first
		// client requires. In-process connections are never made to use it.
		opts.TLSConfig = tc
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start embedded NATS: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		noRoutes := cfg.Cluster != nil && srv.ClusterAddr() == nil // before Shutdown, which clears it
		srv.Shutdown()
		srv.WaitForShutdown()
		if noRoutes {
			return nil, fmt.Errorf("start embedded NATS: not ready after 10s: no route listener on %s (taken meanwhile?)", cfg.Cluster.Listen)
		}
		return nil, errors.New("start embedded NATS: not ready after 10s")
	}
	ln, err := cfg.Network.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded NATS: listen on %s: %w", cfg.Listen, err)
	}
	e := &EmbeddedNATS{srv: srv, ln: ln, log: log, auth: auth, tls: tc, conns: map[net.Conn]struct{}{}}
	e.wg.Add(1)
	go e.acceptLoop()
	log.Info("embedded NATS listening", "addr", ln.Addr().String(), "jetstream", opts.JetStream, "tls", tc != nil)
	return e, nil
}

// Addr is the address clients connect to.
func (e *EmbeddedNATS) Addr() net.Addr { return e.ln.Addr() }

// URL is Addr as a tls:// URL with TLS, else a nats:// one.
func (e *EmbeddedNATS) URL() string {
	if e.tls != nil {
		return "tls://" + e.ln.Addr().String()
	}
	return "nats://" + e.ln.Addr().String()
}

// Server returns the nats-server, e.g. for nats.InProcessServer.
func (e *EmbeddedNATS) Server() *server.Server { return e.srv }

func (e *EmbeddedNATS) acceptLoop() {
	defer e.wg.Done()
	for {
		c, err := e.ln.Accept()
		if err != nil {
			return
		}
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			c.Close()
			return
		}
		e.conns[c] = struct{}{}
		e.mu.Unlock()
		e.wg.Add(1)
		go e.serve(c)
	}
}

// serve terminates TLS on an accepted connection, if configured, and
// bridges it to a new in-process connection of the server.
func (e *EmbeddedNATS) serve(c net.Conn) {
	defer e.wg.Done()
	defer func() {
		c.Close()
		e.mu.Lock()
		delete(e.conns, c)
		e.mu.Unlock()
	}()
	outer := c
	if e.tls != nil {
		tc := tls.Server(c, e.tls)
		_ = tc.SetDeadline(time.Now().Add(tlsHandshakeTimeout))
		if err := tc.Handshake(); err != nil {
			e.log.Debug("embedded NATS: TLS handshake", "remote", c.RemoteAddr().String(), "err", err)
			return
		}
		_ = tc.SetDeadline(time.Time{})
		outer = tc
	}
	inner, err := e.srv.InProcessConn()
	if err != nil {
		e.log.Warn("embedded NATS: in-process connection", "err", err)
		return
	}
	e.bridge(outer, inner)
}

// bridge copies between an accepted connection and the server until either
// side closes.
func (e *EmbeddedNATS) bridge(outer, inner net.Conn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(inner, outer)
		inner.Close()
		close(done)
	}()
	_, _ = io.Copy(outer, inner)
	outer.Close()
	inner.Close()
	<-done
}

// Close stops the listener, drops every client and shuts the server down.
func (e *EmbeddedNATS) Close() error {
	err := e.ln.Close()
	e.mu.Lock()
	e.closed = true
	for c := range e.conns {
		c.Close()
	}
	e.mu.Unlock()
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.wg.Wait()
	return err
}
