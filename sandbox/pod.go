package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/policy"
	"github.com/latticelab/lattice/proxy"
)

// PodDriver is pod mode: the node's overlay on an in-process netstack,
// reached by the agent from namespaces of its own through a gateway
// (IsolationNamespace) or through authenticated proxies. It needs no
// privileges.
type PodDriver struct {
	base
	creds proxy.Credentials

	prov    *netstack.SandboxProvisioner
	egress  *egress
	watcher *policy.Watcher

	spawnMu sync.Mutex // held while an agent's init is started

	// spareCtx ends at Close, stopping the making of a spare init.
	spareCtx    context.Context
	spareCancel context.CancelFunc
	spareWG     sync.WaitGroup

	mu        sync.Mutex // guards the following fields
	spare     *spareSlot // the agent's init made ahead (spare_linux.go)
	servers   []*proxy.Server
	forwards  []*forwarder
	socks5    string
	httpProxy string
	closed    bool

	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

var _ IsolationDriver = (*PodDriver)(nil)

// NewPod validates cfg; Start brings the sandbox up.
func NewPod(cfg DriverConfig) (*PodDriver, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.EgressPolicy != "" {
		if err := edition.Require("egress policy (--egress-policy)"); err != nil {
			return nil, err
		}
	}
	if len(cfg.Forwards) > 0 {
		if err := edition.Require("inbound forwarding (--forward)"); err != nil {
			return nil, err
		}
	}
	iso, err := ParseIsolation(string(cfg.Isolation))
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	cfg.Isolation = iso
	d := &PodDriver{base: newBase(cfg, ModePod)}
	d.spareCtx, d.spareCancel = context.WithCancel(context.Background())
	if cfg.ProxyCredentials != nil {
		d.creds = *cfg.ProxyCredentials
	} else {
		d.creds = RandomCredentials()
	}
	return d, nil
}

// RandomCredentials makes a proxy user "lattice" with a random password.
func RandomCredentials() proxy.Credentials {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return proxy.Credentials{Username: "lattice", Password: hex.EncodeToString(b[:])}
}

// ProxyCredentials returns the credentials both proxies require.
func (d *PodDriver) ProxyCredentials() proxy.Credentials { return d.creds }

// Start implements IsolationDriver.
func (d *PodDriver) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			_ = d.Close()
		}
	}()
	cfg := d.cfg
	if cfg.Isolation == IsolationNamespace && cfg.Network == netx.OS {
		if err := d.probeIsolation(ctx); err != nil {
			return err
		}
	}
	creds, err := d.openState()
	if err != nil {
		return err
	}

	pol := policy.AllowAll()
	current := func() *policy.Policy { return pol }
	if cfg.EgressPolicy != "" {
		w, err := policy.NewWatcher(policy.WatcherConfig{Path: cfg.EgressPolicy, Logger: cfg.Logger, OnChange: func(p *policy.Policy) {
			d.log.Info("egress policy reloaded", "file", cfg.EgressPolicy, "digest", p.Digest())
			_ = d.record(audit.Event{Kind: "policy", Detail: "reloaded " + p.Source() + " " + p.Digest()})
		}})
		if err != nil {
			return fmt.Errorf("sandbox: egress policy: %w", err)
		}
		d.watcher = w
		current = w.Current
	}
	d.egress = &egress{policy: current, record: d.record, peers: d.peers, isHost: newHostAddrs(cfg.Network, cfg.ListenAddr).contains}

	d.prov = &netstack.SandboxProvisioner{Logger: cfg.Logger, Egress: d.egress.stack}
	n, err := node.Start(ctx, node.Config{
		Name: cfg.Name, Network: cfg.Network, Control: cfg.ServerURL, Token: cfg.Token,
		Credentials: creds, ListenPort: cfg.ListenPort, ListenAddr: cfg.ListenAddr, Provisioner: d.prov,
		RelayTransport: cfg.RelayTransport, ICE: cfg.ICE, Logger: cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	d.setNode(n)
	d.egress.overlay = n.Address().Masked()
	d.egress.stackNet = d.prov.Stack()
	d.egress.host = cfg.Network

	if err := d.startProxies(ctx); err != nil {
		return err
	}
	for _, f := range cfg.Forwards {
		if err := d.startForward(ctx, f); err != nil {
			return err
		}
	}
	id := n.Identity()
	if err := d.record(audit.Event{Kind: "start", Detail: fmt.Sprintf("sandbox %s (%s) at %v, policy %s, isolation %s", id.Name, id.NodeID, id.Address, current().Source(), cfg.Isolation)}); err != nil {
		return err
	}
	if cfg.Isolation == IsolationNamespace && cfg.Network == netx.OS {
		d.startSpare()
	}
	return nil
}

func (d *PodDriver) startProxies(ctx context.Context) error {
	for _, p := range []struct {
		kind string
		addr string
		out  *string
		new  func(proxy.Config) (*proxy.Server, error)
	}{
		{"socks5", d.cfg.SOCKS5, &d.socks5, proxy.NewSOCKS5},
		{"http", d.cfg.HTTPProxy, &d.httpProxy, proxy.NewHTTP},
	} {
		if p.addr == "" {
			continue
		}
		srv, err := p.new(proxy.Config{Dial: d.Dial, ListenPacket: d.cfg.Network.ListenPacket, Credentials: &d.creds,
			Logger: d.cfg.Logger, Event: d.proxyEvent(p.kind), LoginFailed: d.loginEvent(p.kind)})
		if err != nil {
			return fmt.Errorf("sandbox: proxy: %w", err)
		}
		ln, err := d.cfg.Network.Listen(ctx, "tcp", p.addr)
		if err != nil {
			_ = srv.Close()
			return fmt.Errorf("sandbox: proxy on %s: %w", p.addr, err)
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			ln.Close()
			_ = srv.Close()
			return ErrClosed
		}
		*p.out = ln.Addr().String()
		d.servers = append(d.servers, srv)
		d.wg.Go(func() { _ = srv.Serve(ln) })
		d.mu.Unlock()
	}
	return nil
}

// Dial connects to address ("host:port"; host an IP literal, a peer's
// name, or a name the host resolves) on behalf of the agent: overlay
// destinations through the netstack, others through the host network,
// each only if the egress policy allows it.
func (d *PodDriver) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	return d.egress.dial(ctx, network, address)
}

// Resolve answers what Dial would connect to for host.
func (d *PodDriver) Resolve(ctx context.Context, host string) (Resolution, error) {
	return d.egress.resolve(ctx, host)
}

// proxyEvent audits a connection an agent asked a proxy for.
func (d *PodDriver) proxyEvent(kind string) func(proxy.Attempt) {
	return func(a proxy.Attempt) {
		e := audit.Event{Kind: "connect", Proto: a.Network, Dst: a.Address, Detail: kind, Decision: "allow"}
		if a.Client != nil {
			e.Src = a.Client.String()
		}
		if a.Err != nil {
			e.Decision = "fail"
			if errors.Is(a.Err, proxy.ErrDenied) {
				e.Decision = "deny"
			}
			e.Detail += ": " + a.Err.Error()
		}
		_ = d.record(e)
	}
}

// loginEvent audits a refused proxy login: who tried and why, never the
// password.
func (d *PodDriver) loginEvent(kind string) func(proxy.LoginFailure) {
	return func(f proxy.LoginFailure) {
		e := audit.Event{Kind: "login", Proto: "tcp", Decision: "deny", Detail: kind + ": " + f.Reason}
		if f.Client != nil {
			e.Src = f.Client.String()
		}
		if f.Username != "" {
			e.Detail += fmt.Sprintf(" (user %q)", f.Username)
		}
		_ = d.record(e)
	}
}

// ReloadPolicy rereads the egress policy file now (SIGHUP); a bad file
// leaves the current policy in force and is returned as the error.
func (d *PodDriver) ReloadPolicy() error {
	if d.watcher == nil {
		return nil
	}
	return d.watcher.Reload()
}

// Stack returns the overlay netstack (nil before Start).
func (d *PodDriver) Stack() *netstack.Stack {
	if d.prov == nil {
		return nil
	}
	return d.prov.Stack()
}

// Status implements IsolationDriver.
func (d *PodDriver) Status() Status {
	st := d.status(ModePod)
	d.mu.Lock()
	st.SOCKS5, st.HTTPProxy = d.socks5, d.httpProxy
	st.Isolation = d.cfg.Isolation
	for _, f := range d.forwards {
		st.Forwards = append(st.Forwards, f.spec.String())
	}
	d.mu.Unlock()
	if d.egress != nil {
		st.Policy = d.egress.policy().Source()
	}
	return st
}

// Close implements IsolationDriver.
func (d *PodDriver) Close() error {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.closed = true
		servers, forwards := d.servers, d.forwards
		d.mu.Unlock()
		d.closeSpare()
		var errs []error
		for _, s := range servers {
			errs = append(errs, s.Close())
		}
		for _, f := range forwards {
			errs = append(errs, f.Close())
		}
		d.wg.Wait()
		errs = append(errs, d.closeNode())
		if d.watcher != nil {
			errs = append(errs, d.watcher.Close())
		}
		errs = append(errs, d.closeAudit())
		d.closeErr = errors.Join(errs...)
	})
	return d.closeErr
}
