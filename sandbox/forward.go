package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/proxy"
)

// Forward exposes a local service on an overlay port: peers connecting to
// the sandbox's overlay address on Port reach Target through the host
// network.
type Forward struct {
	Port   uint16
	Target string // host:port
}

func (f Forward) String() string { return fmt.Sprintf("%d=%s", f.Port, f.Target) }

// ParseForward parses a --forward value: "PORT=HOST:PORT", or "PORT" alone
// for the same port on 127.0.0.1.
func ParseForward(s string) (Forward, error) {
	portStr, target, ok := strings.Cut(s, "=")
	port, err := strconv.ParseUint(strings.TrimSpace(portStr), 10, 16)
	if err != nil || port == 0 {
		return Forward{}, fmt.Errorf("forward %q: overlay port %q: want a number 1-65535 (PORT=HOST:PORT)", s, portStr)
	}
	if !ok {
		target = "127.0.0.1:" + portStr
	}
	target = strings.TrimSpace(target)
	host, tport, err := net.SplitHostPort(target)
	if err != nil {
		return Forward{}, fmt.Errorf("forward %q: target %q: want HOST:PORT", s, target)
	}
	if p, err := strconv.ParseUint(tport, 10, 16); err != nil || p == 0 {
		return Forward{}, fmt.Errorf("forward %q: target port %q: want a number 1-65535", s, tport)
	}
	if host == "" {
		return Forward{}, fmt.Errorf("forward %q: target %q has no host (e.g. 127.0.0.1:%s)", s, target, tport)
	}
	if _, err := netip.ParseAddr(host); err != nil && host != "localhost" {
		return Forward{}, fmt.Errorf("forward %q: target host %q: want an IP address or localhost", s, host)
	}
	return Forward{Port: uint16(port), Target: target}, nil
}

func checkForwards(fs []Forward) error {
	seen := map[uint16]bool{}
	for _, f := range fs {
		if seen[f.Port] {
			return fmt.Errorf("sandbox: forward %v: overlay port %d is forwarded twice", f, f.Port)
		}
		seen[f.Port] = true
	}
	return nil
}

// forwarder serves one Forward.
type forwarder struct {
	spec   Forward
	ln     net.Listener
	dial   func(ctx context.Context, network, address string) (net.Conn, error)
	record func(audit.Event) error

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex // guards conns
	conns  map[net.Conn]struct{}
}

func (d *PodDriver) startForward(ctx context.Context, f Forward) error {
	ln, err := d.prov.Stack().Listen(ctx, "tcp", fmt.Sprintf(":%d", f.Port))
	if err != nil {
		return fmt.Errorf("sandbox: forward %v: %w", f, err)
	}
	fw := &forwarder{spec: f, ln: ln, dial: d.cfg.Network.Dial, record: d.record, conns: map[net.Conn]struct{}{}}
	fw.ctx, fw.cancel = context.WithCancel(context.Background())
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		fw.cancel()
		ln.Close()
		return ErrClosed
	}
	d.forwards = append(d.forwards, fw)
	d.mu.Unlock()
	fw.wg.Go(fw.serve)
	d.log.Info("forwarding", "overlay_port", f.Port, "target", f.Target)
	return nil
}

func (fw *forwarder) serve() {
	for {
		c, err := fw.ln.Accept()
		if err != nil {
			return
		}
		if !fw.track(c, true) {
			c.Close()
			return
		}
		fw.wg.Go(func() { fw.handle(c) })
	}
}

// track adds or removes c; adding fails once the forwarder is closing.
func (fw *forwarder) track(c net.Conn, add bool) bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if !add {
		delete(fw.conns, c)
		return true
	}
	if fw.conns == nil {
		return false
	}
	fw.conns[c] = struct{}{}
	return true
}

func (fw *forwarder) handle(c net.Conn) {
	defer fw.track(c, false)
	defer c.Close()
	ev := audit.Event{Kind: "forward", Proto: "tcp", Src: c.RemoteAddr().String(), Dst: fw.spec.Target,
		Detail: fmt.Sprintf("overlay port %d", fw.spec.Port), Decision: "allow"}
	ctx, cancel := context.WithTimeout(fw.ctx, 10*time.Second)
	t, err := fw.dial(ctx, "tcp", fw.spec.Target)
	cancel()
	if err != nil {
		ev.Decision = "fail"
		ev.Detail += ": " + err.Error()
		_ = fw.record(ev)
		return
	}
	if err := fw.record(ev); err != nil {
		t.Close() // unaudited, the forward does not happen
		return
	}
	if !fw.track(t, true) {
		t.Close()
		return
	}
	defer fw.track(t, false)
	proxy.Splice(c, t)
}

// Close stops accepting, cuts every forwarded connection and waits.
func (fw *forwarder) Close() error {
	err := fw.ln.Close()
	fw.cancel()
	fw.mu.Lock()
	conns := fw.conns
	fw.conns = nil
	fw.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	fw.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
