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
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/topology"
	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/proxy"
	"github.com/latticelab/lattice/sandbox"
)

// runningNode is a started node, of one of three kinds: a node on an
// in-process netstack (inProcessNode), a pod sandbox (podNode), or a
// gvisor sandbox in a process of its own (gvisorNode).
type runningNode interface {
	// common is what every kind has.
	common() *nodeCommon
	// overlay is where the node's own traffic starts.
	overlay() netx.Network
	// status is the node's view of its peers.
	status() []node.PeerStatus
	// nodeID is the node's ID at control.
	nodeID() string
	// addr is the node's overlay address.
	addr() netip.Addr
	// close stops the node and what the lab runs for it. Idempotent.
	close() error
}

var (
	_ runningNode = (*inProcessNode)(nil)
	_ runningNode = (*podNode)(nil)
	_ runningNode = (*gvisorNode)(nil)
)

// nodeSpec is what a node is started from.
type nodeSpec struct {
	name string
	plan *topology.PlanNode
	roam *roamingNet // the network its sockets move on, if it roams
}

// nodeCommon is what the lab keeps for every running node.
type nodeCommon struct {
	nodeSpec
	srv  *overlayServers // its overlay test services, once they serve
	once sync.Once
	err  error
}

func (c *nodeCommon) common() *nodeCommon { return c }

// closeWith closes the overlay services, then the node itself (own), the
// roaming network and extra, once.
func (c *nodeCommon) closeWith(own io.Closer, extra ...io.Closer) error {
	c.once.Do(func() {
		var errs []error
		if c.srv != nil {
			errs = append(errs, c.srv.Close())
		}
		if own != nil {
			errs = append(errs, own.Close())
		}
		if c.roam != nil {
			errs = append(errs, c.roam.Close())
		}
		for _, x := range extra {
			errs = append(errs, x.Close())
		}
		c.err = errors.Join(errs...)
	})
	return c.err
}

// inProcessNode is a Lattice node on an in-process netstack.
type inProcessNode struct {
	nodeCommon
	node  *node.Node
	stack *netstack.Stack
}

func (n *inProcessNode) overlay() netx.Network     { return n.stack }
func (n *inProcessNode) status() []node.PeerStatus { return n.node.Status() }
func (n *inProcessNode) nodeID() string            { return n.node.Identity().NodeID }
func (n *inProcessNode) addr() netip.Addr          { return n.node.Address().Addr() }

func (n *inProcessNode) close() error { return n.closeWith(n.node) }

// podNode is a pod sandbox: an in-process node with its driver's proxies
// and forwards, and web servers on its host that the forwards reach.
type podNode struct {
	inProcessNode
	pod   *sandbox.PodDriver
	extra []io.Closer // forward targets on the node's host
}

func (n *podNode) close() error { return n.closeWith(n.pod, n.extra...) }

// gvisorNode is a gvisor sandbox: a child process in its pod's network
// namespace (a kernel host), whose wg0 routes into the overlay.
type gvisorNode struct {
	nodeCommon
	child  *gvisorChild
	kernel *fabric.KernelHost
}

func (n *gvisorNode) overlay() netx.Network     { return n.kernel }
func (n *gvisorNode) status() []node.PeerStatus { return n.child.peers() }
func (n *gvisorNode) nodeID() string            { return n.child.identity().NodeID }
func (n *gvisorNode) addr() netip.Addr          { return n.child.identity().Address.Addr() }

func (n *gvisorNode) close() error { return n.closeWith(closerFunc(n.child.close)) }

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

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

// Nodes start one at a time in small labs, so their order (and the
// overlay addresses control hands out in it) follows the plan. In larger
// ones startParallel start at once: a node's start is mostly round trips
// to control (registration, the session, the peer list), and one at a
// time a thousand nodes spent most of their bring-up waiting on them.
const (
	parallelStartFrom = 32
	startParallel     = 16
)

// StartNodes starts the named nodes, in the order given (overlapping in a
// large lab, see startParallel), and returns when each has registered and
// serves its overlay test services. A node that fails to start does not
// keep the others from it.
func (l *Lab) StartNodes(ctx context.Context, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	start := time.Now()
	errs := make([]error, len(names))
	if len(names) < parallelStartFrom {
		for i, name := range names {
			errs[i] = l.startNode(ctx, name)
		}
	} else {
		var wg sync.WaitGroup
		slots := make(chan struct{}, startParallel)
		for i, name := range names {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				errs[i] = l.startNode(ctx, name)
			})
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(names) > 3 {
		l.progress("%d nodes up in %s", len(names), scenario.FormatDuration(time.Since(start)))
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
	c := nodeSpec{name: name, plan: pn}
	network := l.hostNet(pn.Host)
	if len(pn.Roams) > 0 {
		c.roam = newRoamingNet(l.f.Host(pn.Host), pn.Network)
		network = c.roam
	}
	var rn runningNode
	var err error
	switch sb := pn.Sandbox; {
	case sb != nil && sb.Mode == "gvisor":
		rn, err = l.startGVisorNode(ctx, c)
	case sb != nil:
		rn, err = l.startPodNode(ctx, c, network)
	default:
		rn, err = l.startInProcessNode(ctx, c, network)
	}
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	srv, err := serveOverlay(rn.overlay(), name)
	if err != nil {
		_ = rn.close()
		return fmt.Errorf("node %s: overlay services: %w", name, err)
	}
	rn.common().srv = srv
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return rn.close()
	}
	l.nodes[name] = rn
	l.started[name] = begin
	l.up[name] = time.Now()
	l.mu.Unlock()
	kind := "node"
	if pn.Sandbox != nil {
		kind = pn.Sandbox.Mode + " sandbox"
	}
	l.progress("%s %s up on %s (%s, NAT %s) as %v in %s", kind, name, pn.Host, pn.Addr, l.plan.NATLabel(pn),
		rn.addr(), scenario.FormatDuration(time.Since(begin)))
	return nil
}

func iceConfig(pn *topology.PlanNode) node.ICEConfig {
	return node.ICEConfig{AttemptTimeout: pn.ICE.AttemptTimeout, RetryMin: pn.ICE.RetryMin, RetryMax: pn.ICE.RetryMax,
		DeadAfter: pn.ICE.DeadAfter, RelayOnly: pn.ICE.RelayOnly,
		Lazy: pn.ICE.Lazy, IdleTimeout: pn.ICE.IdleTimeout, AlwaysDirect: pn.ICE.AlwaysDirect}
}

// startGVisorNode starts a gvisor sandbox's child in its host's network
// namespace.
func (l *Lab) startGVisorNode(ctx context.Context, c nodeSpec) (runningNode, error) {
	pn := c.plan
	n := &gvisorNode{nodeCommon: nodeCommon{nodeSpec: c}, kernel: l.f.KernelHost(pn.Host)}
	if n.kernel == nil {
		return nil, fmt.Errorf("host %s is no kernel host", pn.Host)
	}
	gv, err := startGVisor(ctx, sandbox.DriverConfig{Name: c.name, ServerURL: l.controlURL(), Token: l.plan.Token,
		StateDir: filepath.Join(l.state, "sandboxes", c.name), ListenPort: int(pn.ListenPort),
		RelayTransport: pn.RelayTransport, ICE: iceConfig(pn), EgressPolicy: pn.Sandbox.EgressPolicy},
		n.kernel.NetnsPath(), l.log.With("node", c.name))
	if err != nil {
		return nil, err
	}
	n.child = gv
	return n, nil
}

// startPodNode starts a pod sandbox on network, and the web servers its
// forwards reach on its host.
func (l *Lab) startPodNode(ctx context.Context, c nodeSpec, network netx.Network) (runningNode, error) {
	pn, sb := c.plan, c.plan.Sandbox
	via, err := l.nodeReach(ctx, pn) // the driver has no NAT64 prefix: relays over native IPv6 only
	if err != nil {
		return nil, err
	}
	cfg := sandbox.DriverConfig{Name: c.name, ServerURL: via.control, Token: l.plan.Token,
		StateDir: filepath.Join(l.state, "sandboxes", c.name), Network: network, ListenPort: int(pn.ListenPort),
		RelayTransport: pn.RelayTransport, ICE: iceConfig(pn), EgressPolicy: sb.EgressPolicy, Logger: l.log.With("node", c.name),
		ProxyCredentials: &proxy.Credentials{Username: "agent", Password: "lattice-lab-" + c.name}}
	if sb.SOCKS5 != "off" {
		cfg.SOCKS5 = sb.SOCKS5
	}
	cfg.HTTPProxy = sb.HTTPProxy
	for _, f := range sb.Forwards {
		fw, err := sandbox.ParseForward(f)
		if err != nil {
			return nil, err
		}
		cfg.Forwards = append(cfg.Forwards, fw)
	}
	d, err := sandbox.NewPod(cfg)
	if err != nil {
		return nil, err
	}
	n := &podNode{inProcessNode: inProcessNode{nodeCommon: nodeCommon{nodeSpec: c}}, pod: d}
	for _, fw := range cfg.Forwards {
		// What the forward exposes: a web server on the sandbox's host.
		ln, err := l.hostNet(pn.Host).Listen(ctx, "tcp", fw.Target)
		if err != nil {
			_ = n.closeWith(nil, n.extra...) // the pod has not started
			return nil, fmt.Errorf("forward target %s: %w", fw.Target, err)
		}
		web := &http.Server{Handler: helloHandler("hello from " + c.name + "'s host"), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = web.Serve(ln) }()
		n.extra = append(n.extra, web)
	}
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	n.node, n.stack = d.Node(), d.Stack()
	return n, nil
}

// The WireGuard batch of the lab's in-process nodes, the Bind's and the
// TUN's (node Config.Batch, netstack Config.Batch): wireguard-go keeps
// that many 64 KiB buffers on each of a node's three read paths for the
// node's life. netstack's default 64 held about 6 MiB per idle node; at
// labBatch it is 3 MiB, and in labs of largeLab nodes or more, at
// labLargeBatch, 768 KiB: at 16, those buffers were 2.9 GB of the 4.6 GB
// live heap of scale-1000 (bench --memprofile, 2026-12-02), and 357 MB of
// the 750 MB of scale.yaml's 100 nodes once every pair had pinged
// (2026-12-06). In labs of
// more than hugeLab nodes the batch is 1 (192 KiB a node): at 4,
// scale-1000's pings left 1.5 GB of those buffers live (2026-12-06). The
// fabric, not the batch, bounds a lab node's throughput.
const (
	labBatch      = 16
	largeLab      = 100
	labLargeBatch = 4
	hugeLab       = 500
)

// nodeBatch is the WireGuard batch of this lab's in-process nodes.
func (l *Lab) nodeBatch() int {
	switch n := len(l.plan.Nodes); {
	case n > hugeLab:
		return 1
	case n >= largeLab:
		return labLargeBatch
	}
	return labBatch
}

// startInProcessNode starts a node on network with a netstack of its own.
func (l *Lab) startInProcessNode(ctx context.Context, c nodeSpec, network netx.Network) (runningNode, error) {
	pn := c.plan
	batch := l.nodeBatch()
	prov := &stackProvisioner{p: netstack.SandboxProvisioner{Logger: l.log.With("node", c.name), Batch: batch}}
	via, err := l.nodeReach(ctx, pn)
	if err != nil {
		if c.roam != nil {
			_ = c.roam.Close()
		}
		return nil, err
	}
	nd, err := node.Start(ctx, node.Config{
		Name: c.name, Network: network, Control: via.control, Token: l.plan.Token, NAT64: via.nat64,
		Credentials: &node.FileCredentials{Path: filepath.Join(l.state, "nodes", c.name+".json")},
		ListenPort:  int(pn.ListenPort), Provisioner: prov, MTU: pn.MTU,
		RelayTransport: pn.RelayTransport, ICE: iceConfig(pn), Batch: batch,
		Logger: l.log, // the node adds node=NAME
	})
	if err != nil {
		if c.roam != nil {
			_ = c.roam.Close()
		}
		return nil, err
	}
	prov.mu.Lock()
	defer prov.mu.Unlock()
	return &inProcessNode{nodeCommon: nodeCommon{nodeSpec: c}, node: nd, stack: prov.stack}, nil
}

// NodeIdentity implements scenario.LifecycleEnv.
func (l *Lab) NodeIdentity(name string) (string, netip.Addr, error) {
	rn, err := l.node(name)
	if err != nil {
		return "", netip.Addr{}, err
	}
	return rn.nodeID(), rn.addr(), nil
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
func (l *Lab) node(name string) (runningNode, error) {
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
