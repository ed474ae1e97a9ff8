package runner

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/relay"
	"github.com/latticelab/lattice/stun"
)

// serviceShared is what survives a service's restart: the relay secret
// control issues tokens with, and the relay certificate nodes pin.
type serviceShared struct {
	secret      []byte
	tls         *tls.Config
	fingerprint string
}

func (l *Lab) startServices(ctx context.Context) error {
	l.shared.secret = make([]byte, 32)
	if _, err := rand.Read(l.shared.secret); err != nil {
		return err
	}
	cert, err := relay.SelfSigned(l.clock.Now())
	if err != nil {
		return fmt.Errorf("relay certificate: %w", err)
	}
	l.shared.tls = &tls.Config{Certificates: []tls.Certificate{cert}}
	l.shared.fingerprint = relay.CertFingerprint(cert.Certificate[0])
	for _, name := range l.serviceNames() {
		if err := l.StartService(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// serviceNames lists the services in start order: STUN and relays before
// control, which tells nodes about them.
func (l *Lab) serviceNames() []string {
	var out []string
	for _, s := range l.plan.STUN {
		out = append(out, s.Name)
	}
	for _, r := range l.plan.Relays {
		out = append(out, r.Name)
	}
	if l.plan.Control != nil {
		out = append(out, "control")
	}
	return out
}

// StartService starts the named service.
func (l *Lab) StartService(ctx context.Context, name string) error {
	l.mu.Lock()
	running := l.services[name] != nil
	l.mu.Unlock()
	if running {
		return fmt.Errorf("service %s is already running", name)
	}
	start := time.Now()
	var (
		c    io.Closer
		err  error
		what string
	)
	switch {
	case name == "control" && l.plan.Control != nil:
		c, err = l.startControl(ctx)
		what = fmt.Sprintf("control with NATS on %s", l.plan.Control.Host)
	default:
		for _, r := range l.plan.Relays {
			if r.Name == name {
				c, err = relay.NewServer(relay.ServerConfig{Network: l.hostNet(r.Host), Addr: r.Addr.String(),
					Secret: l.shared.secret, TLS: l.shared.tls, Logger: l.log.With("relay", name)})
				what = fmt.Sprintf("relay %s on %s %v (QUIC and TCP)", name, r.Host, r.Addr)
			}
		}
		for _, s := range l.plan.STUN {
			if s.Name == name {
				var srv *stun.Server
				srv, err = stun.NewServer(stun.Config{Network: l.hostNet(s.Host), Primary: s.Addr, Alternate: s.Alternate, Logger: l.log})
				if err == nil {
					err = srv.Start(ctx)
				}
				c = srv
				what = fmt.Sprintf("stun %s on %s %v", name, s.Host, s.Addr)
				if s.Alternate.IsValid() {
					what += fmt.Sprintf(" and %v (RFC 5780)", s.Alternate)
				}
			}
		}
	}
	if what == "" {
		return fmt.Errorf("no service %q", name)
	}
	if err != nil {
		if c != nil {
			_ = c.Close()
		}
		return fmt.Errorf("start %s: %w", name, err)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return c.Close()
	}
	l.services[name] = c
	l.mu.Unlock()
	l.progress("%s up in %s", what, scenario.FormatDuration(time.Since(start)))
	return nil
}

// StopService stops the named service.
func (l *Lab) StopService(name string) error {
	l.mu.Lock()
	c := l.services[name]
	delete(l.services, name)
	l.mu.Unlock()
	if c == nil {
		return fmt.Errorf("service %s is not running", name)
	}
	return c.Close()
}

// controlServer closes control and the store it opened.
type controlServer struct {
	*control.Server
	store *control.FileStore
}

func (c controlServer) Close() error {
	err := c.Server.Close()
	if cerr := c.store.Close(); err == nil {
		err = cerr
	}
	return err
}

func (l *Lab) startControl(ctx context.Context) (io.Closer, error) {
	p := l.plan.Control
	store, err := control.OpenFileStore(filepath.Join(l.state, "registry.json"))
	if err != nil {
		return nil, err
	}
	var stuns []string
	for _, s := range l.plan.STUN {
		stuns = append(stuns, s.Addr.String())
	}
	var relays []control.Relay
	for _, r := range l.plan.Relays {
		relays = append(relays, control.Relay{Addr: r.Addr.String(), Fingerprint: l.shared.fingerprint})
	}
	host := l.hostNet(p.Host)
	cfg := control.Config{
		Network: host, Logger: l.log.With("component", "control"),
		Tokens: l.joinTokens(), Store: store,
		EmbeddedNATS: &control.EmbeddedNATSConfig{Network: host, Listen: p.Addr.String()},
		STUN:         stuns, Relays: relays,
		RelayToken: l.issueRelayToken,
	}
	if p.HTTP.IsValid() {
		cfg.HTTPListen = p.HTTP.String()
	}
	srv, err := control.New(ctx, cfg)
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	return controlServer{srv, store}, nil
}

// controlURL is where nodes register: plaintext over the emulated fabric
// (insecure=1, since its addresses are not loopback), which never leaves
// the process or the lab's namespaces.
func (l *Lab) controlURL() string {
	return "nats://" + l.plan.Control.Addr.String() + "?" + control.ParamInsecure + "=1"
}
