package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/policy"
	"github.com/latticelab/lattice/runsc"
)

// RunscDriver is gvisor mode, the spec's two-phase bootstrap. Phase 1, in
// the pod's kernel: NATS registration, wireguard-go on a real TUN (wg0),
// its address and route, and the egress policy as iptables rules. Phase
// 2: runsc runs the agent as PID 1 with --network=host, so every system
// call goes through gVisor's sentry while its traffic follows the pod's
// routes into wg0. The WireGuard key and CAP_NET_ADMIN stay outside the
// container. It needs root (or CAP_NET_ADMIN) and /dev/net/tun.
type RunscDriver struct {
	base
	mgr    *runsc.Manager
	id     string // the container's ID: see ContainerID
	pol    *policy.Policy
	egress *kernelEgress
	bpf    *bpfAhead // wg0's eBPF filter, loaded while the node registers

	agent       *agentPlan // set by Prepare
	prepWG      sync.WaitGroup
	prepMu      sync.Mutex // guards the following fields
	prepared    *preparedAgent
	prepStarted bool // prepared was set once (it may since have been taken)
	closing     bool

	closeOnce sync.Once
	closeErr  error
}

var _ IsolationDriver = (*RunscDriver)(nil)

// NewRunsc checks what gvisor mode needs, with the fix for each miss.
func NewRunsc(cfg DriverConfig) (*RunscDriver, error) {
	if err := edition.Require("gvisor mode (--mode gvisor)"); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.SOCKS5 != "" || cfg.HTTPProxy != "":
		return nil, errors.New("sandbox: gvisor mode has no proxies: the agent's own sockets route into wg0; drop --socks5/--http-proxy")
	case len(cfg.Forwards) > 0:
		return nil, errors.New("sandbox: gvisor mode has no inbound forwards: peers reach the agent's listeners on its overlay address directly")
	case os.Geteuid() != 0:
		return nil, errors.New("sandbox: gvisor mode needs root in the pod (phase 1 creates wg0 and iptables rules; the agent itself gets no privileges); --mode pod needs none")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return nil, fmt.Errorf("sandbox: gvisor mode needs /dev/net/tun (in Kubernetes, mount it into the pod): %w", err)
	}
	stateDir := filepath.Join(os.TempDir(), "lattice-runsc")
	if cfg.StateDir != "mem:" {
		stateDir = filepath.Join(cfg.StateDir, "runsc")
	}
	mgr, err := runsc.NewManager(runsc.Config{Binary: cfg.Runsc, StateDir: stateDir, Platform: cfg.Platform, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if cfg.Interface == "" {
		cfg.Interface = "wg0"
	}
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, fmt.Errorf("sandbox: container ID: %w", err)
	}
	id := fmt.Sprintf("lattice-%s-%x", cfg.Name, suffix)
	return &RunscDriver{base: newBase(cfg, ModeGVisor), mgr: mgr, id: id}, nil
}

// ContainerID is the container's ID: one sandbox, one container. It is
// lattice-NAME-RANDOM, not the name alone: runsc names the container's
// cgroups after it host-wide, so two sandboxes of one name on a machine
// (two pods, two test runs) must not share it.
func (d *RunscDriver) ContainerID() string { return d.id }

// Start implements IsolationDriver: phase 1, bootstrapAgent.
func (d *RunscDriver) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			_ = d.Close()
		}
	}()
	cfg := d.cfg
	creds, err := d.openState()
	if err != nil {
		return err
	}
	d.pol = policy.AllowAll()
	if cfg.EgressPolicy != "" {
		if d.pol, err = policy.Load(cfg.EgressPolicy); err != nil {
			return fmt.Errorf("sandbox: egress policy: %w", err)
		}
	}
	if d.agent != nil {
		creds = &identityHook{CredentialStore: creds, saved: d.prepare}
	}
	prov, err := kernelProvisioner(cfg.Interface, cfg.Logger)
	if err != nil {
		return err
	}
	// wg0's eBPF filter: its maps, program and first table need no wg0,
	// so they are made while the node brings it up (mostly waiting on the
	// kernel); install attaches it. With an agent prepared, the load
	// starts once runsc has been started for it (prepare): runsc waits
	// for registration, which the load's CPU would slow (by 4-5 ms at
	// load 4 here). Else now.
	d.bpf = newBPF(bpfConfig(cfg.Interface, d.pol, recordSink(d.record), d.log))
	if d.agent == nil {
		d.bpf.load()
	}
	n, err := node.Start(ctx, node.Config{
		Name: cfg.Name, Network: cfg.Network, Control: cfg.ServerURL, Token: cfg.Token,
		Credentials: creds, ListenPort: cfg.ListenPort, ListenAddr: cfg.ListenAddr, Provisioner: prov,
		RelayTransport: cfg.RelayTransport, ICE: cfg.ICE, Logger: cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("sandbox: phase 1: %w", err)
	}
	d.setNode(n)
	d.egress = newKernelEgress(cfg.Interface, n.Address(), d.pol, d.peers, d.log)
	d.egress.audit = recordSink(d.record)
	d.egress.ahead = d.bpf
	if err := d.egress.install(); err != nil {
		return fmt.Errorf("sandbox: phase 1: egress rules: %w", err)
	}
	id := n.Identity()
	return d.record(audit.Event{Kind: "start", Detail: fmt.Sprintf("sandbox %s (%s) at %v on %s, gvisor mode, policy %s", id.Name, id.NodeID, id.Address, cfg.Interface, d.pol.Source())})
}

// recordSink is the driver's record as an audit.Sink, for the eBPF
// filter's events: the packet is decided by then, so a failed write is
// only counted and logged (record does both).
type recordSink func(audit.Event) error

func (r recordSink) Write(ev audit.Event) error { return r(ev) }

// Run implements IsolationDriver: phase 2, the agent as PID 1 in runsc.
// The agent Prepare named starts in the container made for it while
// Start ran; any other argv gets a container made now.
func (d *RunscDriver) Run(ctx context.Context, argv []string, stdio Stdio) (int, error) {
	if len(argv) == 0 {
		return -1, errors.New("sandbox: run: no command")
	}
	n := d.Node()
	if n == nil {
		return -1, errors.New("sandbox: run: not started")
	}
	c, err := d.takePrepared(ctx, argv, stdio, n.Identity())
	if err != nil {
		return -1, err
	}
	if c == nil {
		return d.runCold(ctx, argv, stdio, n.Identity())
	}
	if err := d.beforeAgent(argv, c.ID()); err != nil {
		_ = c.Close()
		return -1, err
	}
	if err := c.Start(peerHosts(d.peers())); err != nil {
		_ = c.Close()
		return -1, fmt.Errorf("sandbox: %w", err)
	}
	return d.agentExited(c.Wait(ctx))
}

// runCold runs argv in a container made now.
func (d *RunscDriver) runCold(ctx context.Context, argv []string, stdio Stdio, id node.Identity) (int, error) {
	path, err := agentPath(argv[0])
	if err != nil {
		return -1, err
	}
	spec := d.agentSpec(path, argv, id)
	if err := d.beforeAgent(argv, spec.ID); err != nil {
		return -1, err
	}
	spec.Hosts = peerHosts(d.peers())
	return d.agentExited(d.mgr.Run(ctx, spec, runsc.Stdio{Stdin: stdio.Stdin, Stdout: stdio.Stdout, Stderr: stdio.Stderr}))
}

// agentPath is the agent binary's absolute path.
func agentPath(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("sandbox: agent %q: %w", name, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return "", fmt.Errorf("sandbox: agent %q: %w", name, err)
	}
	return path, nil
}

// agentSpec is the container for the agent at path with argv's arguments
// and the sandbox's identity in its environment; Hosts is left to the
// caller (it is taken when the agent starts).
func (d *RunscDriver) agentSpec(path string, argv []string, id node.Identity) runsc.Spec {
	return runsc.Spec{ID: d.ContainerID(), Args: append([]string{path}, argv[1:]...), Env: []string{
		"LATTICE_SANDBOX=" + id.Name, "LATTICE_NODE_ID=" + id.NodeID, "LATTICE_ADDRESS=" + id.Address.Addr().String(),
	}}
}

// beforeAgent brings the egress rules up to date and audits the agent's
// start: the last steps before it may run.
func (d *RunscDriver) beforeAgent(argv []string, container string) error {
	if d.egress != nil {
		// The chain follows peer changes once a second; bring it up to
		// date now, so a peer the agent can name is one its rules know.
		if err := d.egress.refresh(); err != nil {
			return fmt.Errorf("sandbox: egress rules: %w", err)
		}
	}
	// Unaudited, the agent does not run.
	return d.record(audit.Event{Kind: "agent", Detail: fmt.Sprintf("run %v in runsc container %s", argv, container)})
}

func (d *RunscDriver) agentExited(code int, err error) (int, error) {
	if err != nil {
		return code, fmt.Errorf("sandbox: %w", err)
	}
	_ = d.record(audit.Event{Kind: "agent", Detail: fmt.Sprintf("exited with %d", code)})
	return code, nil
}

// peerHosts is the container's /etc/hosts for peers: NAME and
// NAME.lattice at each named peer's overlay address, the names pod mode's
// resolver answers. It is taken when the agent starts; a peer that joins
// later is reached by address. Sorted by name, then address, so the file
// does not depend on the order control announced the peers in.
func peerHosts(peers []nodePeer) []runsc.HostEntry {
	var out []runsc.HostEntry
	for _, p := range peers {
		if p.name == "" || !p.addr.IsValid() {
			continue
		}
		out = append(out, runsc.HostEntry{Addr: p.addr, Names: []string{p.name, p.name + peerSuffix}})
	}
	slices.SortFunc(out, func(a, b runsc.HostEntry) int {
		if c := strings.Compare(a.Names[0], b.Names[0]); c != 0 {
			return c
		}
		return a.Addr.Compare(b.Addr)
	})
	return out
}

// Status implements IsolationDriver.
func (d *RunscDriver) Status() Status {
	st := d.status(ModeGVisor)
	if d.pol != nil {
		st.Policy = d.pol.Source()
	}
	return st
}

// Close tears down: the container (if still there), the rules, then the
// node, whose closing removes wg0 and its routes.
func (d *RunscDriver) Close() error {
	d.closeOnce.Do(func() {
		var errs []error
		errs = append(errs, d.closePrepared(), d.mgr.Delete(d.ContainerID()))
		if d.egress != nil {
			d.egress.remove()
		}
		if d.bpf != nil {
			d.bpf.close() // loaded, never attached: Start failed before
		}
		errs = append(errs, d.closeNode(), d.closeAudit())
		errs = append(errs, d.mgr.Close())
		d.closeErr = errors.Join(errs...)
	})
	return d.closeErr
}
