package control

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/latticelab/lattice/netx"
)

// EmbeddedNATS is a nats-server running in this process. It listens on a
// netx.Network: each accepted connection is bridged to the server's
// in-process connection, so it works the same on real sockets and on a lab
// host. Clients authenticate as control, as a joining node (user
// "join.<random>", password the join token), or as a registered node (user
// its node ID, password its secret); each gets only the permissions its
// role needs.
type EmbeddedNATS struct {
	srv  *server.Server
	ln   net.Listener
	log  *slog.Logger
	auth *authenticator
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
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
	Logger   *slog.Logger
}

// authenticator decides who may connect and with which permissions.
type authenticator struct {
	controlPass string
	tokens      func(string) error     // checks a join token
	secrets     func(id string) []byte // a node's secret hash, nil if unknown
}

const (
	controlUser = "lattice-control"
	joinPrefix  = "join."
)

// Check implements server.Authentication.
func (a *authenticator) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	switch {
	case o.Username == controlUser:
		if subtle.ConstantTimeCompare([]byte(o.Password), []byte(a.controlPass)) != 1 {
			return false
		}
		c.RegisterUser(&server.User{Username: controlUser}) // every permission
		return true
	case strings.HasPrefix(o.Username, joinPrefix):
		id := strings.TrimPrefix(o.Username, joinPrefix)
		if !validInboxID(id) || a.tokens(o.Password) != nil {
			return false
		}
		c.RegisterUser(&server.User{Username: o.Username, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{SubjectRegister}},
			Subscribe: &server.SubjectPermission{Allow: []string{InboxPrefix + "." + o.Username + ".>"}},
		}})
		return true
	default:
		hash := a.secrets(o.Username)
		sum := sha256.Sum256([]byte(o.Password))
		if hash == nil || subtle.ConstantTimeCompare(hash, sum[:]) != 1 {
			return false
		}
		c.RegisterUser(&server.User{Username: o.Username, Permissions: nodePermissions(o.Username)})
		return true
	}
}

// nodePermissions confine a node to its own subjects and inbox.
func nodePermissions(id string) *server.Permissions {
	own := subjectNodes + id + ".>"
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{own}},
		Subscribe: &server.SubjectPermission{Allow: []string{own, InboxPrefix + "." + id + ".>"}},
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
	opts := &server.Options{
		ServerName:                 "lattice-control",
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
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start embedded NATS: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("start embedded NATS: not ready after 10s")
	}
	ln, err := cfg.Network.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded NATS: listen on %s: %w", cfg.Listen, err)
	}
	e := &EmbeddedNATS{srv: srv, ln: ln, log: log, auth: auth, conns: map[net.Conn]struct{}{}}
	e.wg.Add(1)
	go e.acceptLoop()
	log.Info("embedded NATS listening", "addr", ln.Addr().String(), "jetstream", opts.JetStream)
	return e, nil
}

// Addr is the address clients connect to.
func (e *EmbeddedNATS) Addr() net.Addr { return e.ln.Addr() }

// URL is Addr as a nats:// URL.
func (e *EmbeddedNATS) URL() string { return "nats://" + e.ln.Addr().String() }

// Server returns the nats-server, e.g. for nats.InProcessServer.
func (e *EmbeddedNATS) Server() *server.Server { return e.srv }

func (e *EmbeddedNATS) acceptLoop() {
	defer e.wg.Done()
	for {
		c, err := e.ln.Accept()
		if err != nil {
			return
		}
		inner, err := e.srv.InProcessConn()
		if err != nil {
			e.log.Warn("embedded NATS: in-process connection", "err", err)
			c.Close()
			continue
		}
		e.mu.Lock()
		e.conns[c] = struct{}{}
		e.mu.Unlock()
		e.wg.Add(1)
		go e.bridge(c, inner)
	}
}

// bridge copies between an accepted connection and the server until either
// side closes.
func (e *EmbeddedNATS) bridge(outer, inner net.Conn) {
	defer e.wg.Done()
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
	e.mu.Lock()
	delete(e.conns, outer)
	e.mu.Unlock()
}

// Close stops the listener, drops every client and shuts the server down.
func (e *EmbeddedNATS) Close() error {
	err := e.ln.Close()
	e.mu.Lock()
	for c := range e.conns {
		c.Close()
	}
	e.mu.Unlock()
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.wg.Wait()
	return err
}
