package runner

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/lab/dns"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/topology"
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

// serviceNames lists the services in start order: STUN, relays and DNS
// before control, which tells nodes about STUN and relays.
func (l *Lab) serviceNames() []string {
	var out []string
	for _, s := range l.plan.STUN {
		out = append(out, s.Name)
	}
	for _, r := range l.plan.Relays {
		out = append(out, r.Name)
	}
	for _, d := range l.plan.DNS {
		out = append(out, d.Name)
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
				network := withTwins(l.hostNet(r.Host), map[netip.AddrPort]netip.AddrPort{r.Addr: r.Addr6})
				c, err = relay.NewServer(relay.ServerConfig{Network: network, Addr: r.Addr.String(),
					Secret: l.shared.secret, TLS: l.shared.tls, Logger: l.log.With("relay", name)})
				what = fmt.Sprintf("relay %s on %s %s (QUIC and TCP)", name, r.Host, addrList(r.Addrs()))
			}
		}
		for _, s := range l.plan.STUN {
			if s.Name == name {
				c, err = l.startSTUN(ctx, s)
				what = fmt.Sprintf("stun %s on %s %s", name, s.Host, addrList(s.Addrs()))
				if s.Alternate.IsValid() {
					what += fmt.Sprintf(" and %s (RFC 5780)", addrList([]netip.AddrPort{s.Alternate, s.Alternate6}))
				}
			}
		}
		for _, d := range l.plan.DNS {
			if d.Name == name {
				c, err = l.startDNS(ctx, d)
				what = fmt.Sprintf("dns %s on %s %s", name, d.Host, addrList(d.Addrs()))
				if d.DNS64.IsValid() {
					what += fmt.Sprintf(" (DNS64 %v)", d.DNS64)
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
	// Each server is announced at each of its addresses, IPv4 first: a
	// node uses the ones of the families it has (node.relayOrder).
	var stuns []string
	for _, s := range l.plan.STUN {
		for _, a := range s.Addrs() {
			stuns = append(stuns, a.String())
		}
	}
	var relays []controlapi.Relay
	for _, r := range l.plan.Relays {
		for _, a := range r.Addrs() {
			relays = append(relays, controlapi.Relay{Addr: a.String(), Fingerprint: l.shared.fingerprint})
		}
	}
	twins := map[netip.AddrPort]netip.AddrPort{p.Addr: p.Addr6}
	if p.HTTP.IsValid() && p.Addr6.IsValid() {
		twins[p.HTTP] = netip.AddrPortFrom(p.Addr6.Addr(), p.HTTP.Port())
	}
	host := withTwins(l.hostNet(p.Host), twins)
	cfg := control.Config{
		Network: host, Logger: l.log.With("component", "control"),
		Tokens: l.joinTokens(), Store: store,
		EmbeddedNATS: &control.EmbeddedNATSConfig{Network: host, Listen: p.Addr.String()},
		STUN:         stuns, Relays: relays, AdvertiseNATS: l.advertiseNATS(),
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
	k := srv.RegisterKey()
	l.registerKey.Store(&k)
	return controlServer{srv, store}, nil
}

// controlURL is where nodes register: plaintext over the emulated fabric
// (insecure=1, since its addresses are not loopback), which never leaves
// the process or the lab's namespaces.
func (l *Lab) controlURL() string { return l.controlURLAt(l.plan.Control.Addr) }

// controlURLAt is the control URL at a, with control's register key, so
// that a node's first registration is one request.
func (l *Lab) controlURLAt(a netip.AddrPort) string {
	u := "nats://" + a.String() + "?" + controlapi.ParamInsecure + "=1"
	if k := l.registerKey.Load(); k != nil {
		u += "&" + controlapi.ParamControlKey + "=" + k.Hex()
	}
	return u
}

// startSTUN starts a STUN server on its IPv4 addresses and, on a
// dual-stack network, a second one on their IPv6 twins: an RFC 5780
// server answers each family from addresses of that family.
func (l *Lab) startSTUN(ctx context.Context, s topology.PlanSTUN) (io.Closer, error) {
	var all closers
	for _, addrs := range [][2]netip.AddrPort{{s.Addr, s.Alternate}, {s.Addr6, s.Alternate6}} {
		if !addrs[0].IsValid() {
			continue
		}
		srv, err := stun.NewServer(stun.Config{Network: l.hostNet(s.Host), Primary: addrs[0], Alternate: addrs[1], Logger: l.log})
		if err == nil {
			err = srv.Start(ctx)
		}
		if err != nil {
			return nil, errors.Join(err, all.Close())
		}
		all = append(all, srv)
	}
	return all, nil
}

// startDNS serves the topology's names (and DNS64) on each of d's
// addresses.
func (l *Lab) startDNS(ctx context.Context, d topology.PlanDNS) (io.Closer, error) {
	srv, err := dns.New(dns.Config{Records: d.Records, DNS64: d.DNS64, Logger: l.log.With("dns", d.Name)})
	if err != nil {
		return nil, err
	}
	var all closers
	for _, a := range d.Addrs() {
		ln, err := srv.Listen(ctx, l.hostNet(d.Host), a.String())
		if err != nil {
			return nil, errors.Join(err, all.Close())
		}
		all = append(all, ln)
	}
	return all, nil
}

// closers closes each of its members.
type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// addrList writes addresses for people: "203.0.113.100:443 and
// [2001:db8::64]:443", leaving out zero ones.
func addrList(as []netip.AddrPort) string {
	var ss []string
	for _, a := range as {
		if a.IsValid() {
			ss = append(ss, a.String())
		}
	}
	return strings.Join(ss, " and ")
}
