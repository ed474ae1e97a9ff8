package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/tun"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/topology"
	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/proxy"
	"github.com/latticelab/lattice/sandbox"
)

// runningNode is a started node: a regular node on an in-process
// netstack, a pod sandbox, or a gvisor sandbox in a process of its own
// (gv; then node and stack are nil and its pod's namespace is kernel).
type runningNode struct {
	name   string
	plan   *topology.PlanNode
	node   *node.Node
	pod    *sandbox.PodDriver
	stack  *netstack.Stack
	gv     *gvisorChild
	kernel *fabric.KernelHost
	roam   *roamingNet
	srv    *overlayServers
	extra  []io.Closer // forward targets on the node's host
	once   sync.Once
	err    error
}

func (n *runningNode) close() error {
	n.once.Do(func() {
		var errs []error
		if n.srv != nil {
			errs = append(errs, n.srv.Close())
		}
		if n.gv != nil {
			errs = append(errs, n.gv.close())
		} else if n.pod != nil {
			errs = append(errs, n.pod.Close())
		} else if n.node != nil {
			errs = append(errs, n.node.Close())
		}
		if n.roam != nil {
			errs = append(errs, n.roam.Close())
		}
		for _, c := range n.extra {
			errs = append(errs, c.Close())
		}
		n.err = errors.Join(errs...)
	})
	return n.err
}

// overlay is where the node's own traffic starts: its netstack, or for a
// gvisor sandbox its pod's namespace, whose wg0 routes into the overlay.
func (n *runningNode) overlay() netx.Network {
	if n.kernel != nil {
		return n.kernel
	}
	return n.stack
}

// status is the node's view of its peers.
func (n *runningNode) status() []node.PeerStatus {
	if n.gv != nil {
		return n.gv.peers()
	}
	return n.node.Status()
}

// nodeID is the node's ID at control.
func (n *runningNode) nodeID() string {
	if n.gv != nil {
		return n.gv.identity().NodeID
	}
	return n.node.Identity().NodeID
}

// addr is the node's overlay address.
func (n *runningNode) addr() netip.Addr {
	if n.gv != nil {
		return n.gv.identity().Address.Addr()
	}
	return n.node.Address().Addr()
}

// stackProvisioner is a SandboxProvisioner that hands out its stack.
type stackProvisioner struct {
	p     netstack.SandboxProvisioner
	mu    sync.Mutex
	stack *netstack.Stack
}

func (s *stackProvisioner) Up(ctx context.Context, addr netip.Prefix, mtu int) (tun.Device, error) {
	dev, err := s.p.Up(ctx, addr, mtu)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.stack = s.p.Stack()
	s.mu.Unlock()
	return dev, nil
}

// StartNodes starts the named nodes at once and returns when each has
// registered and serves its overlay test services.
func (l *Lab) StartNodes(ctx context.Context, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	start := time.Now()
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	// One at a time: a node that registers while another is between its
	// own registration and its NATS subscription is never announced to
	// it (node.Start takes the peer list at registration and misses the
	// events in between), so concurrent starts lose peers.
	sem := make(chan struct{}, 1)
	for i, name := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = l.startNode(ctx, name)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(names) > 3 {
		l.progress("%d nodes up in %s", len(names), fmtDuration(time.Since(start)))
	}
	return nil
}

func (l *Lab) startNode(ctx context.Context, name string) error {
	pn := l.plan.Node(name)
	if pn == nil {
		return fmt.Errorf("no node %q", name)
	}
	l.mu.Lock()
	_, running := l.nodes[name]
	closed := l.closed
	l.mu.Unlock()
	switch {
	case closed:
		return errors.New("lab closed")
	case running:
		return fmt.Errorf("node %s is already running", name)
	}
	begin := time.Now()
	rn := &runningNode{name: name, plan: pn}
	network := l.hostNet(pn.Host)
	if len(pn.Roams) > 0 {
		rn.roam = newRoamingNet(l.f.Host(pn.Host), pn.Network)
		network = rn.roam
	}
	ice := node.ICEConfig{AttemptTimeout: pn.ICE.AttemptTimeout, RetryMin: pn.ICE.RetryMin, RetryMax: pn.ICE.RetryMax,
		DeadAfter: pn.ICE.DeadAfter, RelayOnly: pn.ICE.RelayOnly}
	log := l.log.With("node", name)
	if sb := pn.Sandbox; sb != nil && sb.Mode == "gvisor" {
		rn.kernel = l.f.KernelHost(pn.Host)
		if rn.kernel == nil {
			return fmt.Errorf("node %s: host %s is no kernel host", name, pn.Host)
		}
		gv, err := startGVisor(ctx, childConfig{Name: name, ServerURL: l.controlURL(), Token: l.plan.Token,
			StateDir: filepath.Join(l.state, "sandboxes", name), ListenPort: int(pn.ListenPort),
			RelayTransport: pn.RelayTransport, ICE: pn.ICE, EgressPolicy: sb.EgressPolicy}, rn.kernel.NetnsPath(), log)
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		rn.gv = gv
	} else if sb != nil {
		cfg := sandbox.DriverConfig{Name: name, ServerURL: l.controlURL(), Token: l.plan.Token,
			StateDir: filepath.Join(l.state, "sandboxes", name), Network: network, ListenPort: int(pn.ListenPort),
			RelayTransport: pn.RelayTransport, ICE: ice, EgressPolicy: sb.EgressPolicy, Logger: log,
			ProxyCredentials: &proxy.Credentials{Username: "agent", Password: "lattice-lab-" + name}}
		if sb.SOCKS5 != "off" {
			cfg.SOCKS5 = sb.SOCKS5
		}
		cfg.HTTPProxy = sb.HTTPProxy
		for _, f := range sb.Forwards {
			fw, err := sandbox.ParseForward(f)
			if err != nil {
				return fmt.Errorf("node %s: %w", name, err)
			}
			cfg.Forwards = append(cfg.Forwards, fw)
		}
		d, err := sandbox.NewPod(cfg)
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		for _, fw := range cfg.Forwards {
			// What the forward exposes: a web server on the sandbox's host.
			ln, err := l.hostNet(pn.Host).Listen(ctx, "tcp", fw.Target)
			if err != nil {
				_ = rn.close()
				return fmt.Errorf("node %s: forward target %s: %w", name, fw.Target, err)
			}
			web := &http.Server{Handler: helloHandler("hello from " + name + "'s host"), ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = web.Serve(ln) }()
			rn.extra = append(rn.extra, web)
		}
		if err := d.Start(ctx); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		rn.pod, rn.node, rn.stack = d, d.Node(), d.Stack()
	} else {
		prov := &stackProvisioner{p: netstack.SandboxProvisioner{Logger: log}}
		n, err := node.Start(ctx, node.Config{
			Name: name, Network: network, Control: l.controlURL(), Token: l.plan.Token,
			Credentials: &node.FileCredentials{Path: filepath.Join(l.state, "nodes", name+".json")},
			ListenPort:  int(pn.ListenPort), Provisioner: prov,
			Relay: node.LRPRelay(network, log, pn.RelayTransport), ICE: ice, Logger: log,
		})
		if err != nil {
			if rn.roam != nil {
				_ = rn.roam.Close()
			}
			return fmt.Errorf("node %s: %w", name, err)
		}
		rn.node = n
		prov.mu.Lock()
		rn.stack = prov.stack
		prov.mu.Unlock()
	}
	srv, err := serveOverlay(rn.overlay(), name)
	if err != nil {
		_ = rn.close()
		return fmt.Errorf("node %s: overlay services: %w", name, err)
	}
	rn.srv = srv
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return rn.close()
	}
	l.nodes[name] = rn
	l.started[name] = begin
	l.mu.Unlock()
	kind := "node"
	if pn.Sandbox != nil {
		kind = pn.Sandbox.Mode + " sandbox"
	}
	l.progress("%s %s up on %s (%s, NAT %s) as %v in %s", kind, name, pn.Host, pn.Addr, l.plan.NATLabel(pn),
		rn.addr(), fmtDuration(time.Since(begin)))
	return nil
}

// StopNode stops a node; its identity stays for a later start.
func (l *Lab) StopNode(name string) error {
	l.mu.Lock()
	rn := l.nodes[name]
	delete(l.nodes, name)
	l.mu.Unlock()
	if rn == nil {
		return fmt.Errorf("node %s is not running", name)
	}
	l.snapshot(rn)
	return rn.close()
}

// node returns a running node.
func (l *Lab) node(name string) (*runningNode, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rn := l.nodes[name]
	if rn == nil {
		return nil, fmt.Errorf("node %s is not running", name)
	}
	return rn, nil
}

// Running lists the running nodes in plan order.
func (l *Lab) Running() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, n := range l.plan.Nodes {
		if l.nodes[n.Name] != nil {
			out = append(out, n.Name)
		}
	}
	return out
}

// overlayAddr is a running node's overlay address.
func (l *Lab) overlayAddr(name string) (netip.Addr, error) {
	rn, err := l.node(name)
	if err != nil {
		return netip.Addr{}, err
	}
	return rn.addr(), nil
}

// hostNet is a host's network: an in-process host or a kernel host.
func (l *Lab) hostNet(name string) netx.Network {
	if h := l.f.Host(name); h != nil {
		return h
	}
	if k := l.f.KernelHost(name); k != nil {
		return k
	}
	return missingHost(name)
}

// missingHost is a netx.Network that fails: a host the plan names but
// the fabric lacks (a bug, reported rather than a nil dereference).
type missingHost string

func (m missingHost) err() error                                             { return fmt.Errorf("no host %s in the fabric", string(m)) }
func (m missingHost) Dial(context.Context, string, string) (net.Conn, error) { return nil, m.err() }
func (m missingHost) Listen(context.Context, string, string) (net.Listener, error) {
	return nil, m.err()
}
func (m missingHost) ListenPacket(context.Context, string, string) (net.PacketConn, error) {
	return nil, m.err()
}
func (m missingHost) Interfaces() ([]netx.Interface, error) { return nil, m.err() }
