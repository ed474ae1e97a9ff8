package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/egress"
	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/policy"
)

// egressFlags are `lattice up`'s egress policy flags.
type egressFlags struct {
	policy, backend, auditLog, pinRoot string
	failClosed                         bool
	auditPath                          string // the log in use: --audit-log or the state dir's
}

func (f *egressFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.policy, "egress-policy", "", "egress policy file (YAML, as for sandboxes) enforced on the overlay interface; reloaded when it changes or on SIGHUP")
	fl.StringVar(&f.backend, "egress-backend", egress.Auto, "egress enforcement: auto (eBPF in the Pro edition, else iptables), ebpf (Pro) or iptables")
	fl.StringVar(&f.auditLog, "audit-log", "", "hash-chained audit log of egress decisions (default: audit.jsonl in --state-dir)")
	fl.BoolVar(&f.failClosed, "egress-fail-closed", false, "keep the egress filter in the kernel if the node dies; 'lattice egress clear' removes it")
	fl.StringVar(&f.pinRoot, "egress-pin-root", egress.DefaultPinRoot, "bpffs directory where --egress-fail-closed pins the eBPF filter (bpffs is mounted on /sys/fs/bpf if needed)")
	cli.FlagValues(cmd, "egress-backend", egress.Backends...)
	_ = cmd.MarkFlagFilename("egress-policy", "yaml", "yml")
}

// check refuses flag combinations before the node starts.
func (f *egressFlags) check(cmd *cobra.Command, userspace bool, stateDir string) error {
	if f.policy == "" {
		for _, name := range []string{"egress-backend", "audit-log", "egress-fail-closed", "egress-pin-root"} {
			if cmd.Flags().Changed(name) {
				return usagef("--%s needs --egress-policy", name)
			}
		}
		return nil
	}
	if userspace {
		return usagef("--egress-policy filters the kernel's overlay interface; --userspace has none")
	}
	if f.backend != egress.Auto && f.backend != egress.EBPF && f.backend != egress.IPTables {
		return usagef("--egress-backend %q: want auto, ebpf or iptables", f.backend)
	}
	if f.backend == egress.EBPF {
		if err := edition.Require("the eBPF egress backend (--egress-backend ebpf)"); err != nil {
			return err
		}
	}
	// Parsed now, as sandbox start does: the filter is made only once the
	// interface exists, after registration.
	if _, err := policy.Load(f.policy); err != nil {
		return usagef("--egress-policy: %w", err)
	}
	f.auditPath = f.auditLog
	if f.auditPath == "" && stateDir != "mem:" {
		f.auditPath = filepath.Join(stateDir, "audit.jsonl")
	}
	return nil
}

// egressRun is a running egress policy: the enforcer, its audit log and
// the SIGHUP handler.
type egressRun struct {
	f      *egressFlags
	ifname string
	log    *slog.Logger
	node   atomic.Pointer[node.Node] // for the peers, once Start returned

	enf   *egress.Enforcer
	audit *audit.FileWriter
	// counts are the enforcer's audited decisions, for /metrics: made
	// before the interface comes up, so a scrape before then sees none.
	counts *audit.Counter
	stop   func()
}

// wrap makes cfg's interface come up with the policy already enforced:
// the filter goes on as soon as the interface exists, before WireGuard
// has a peer, so nothing leaves unfiltered. nil without a policy.
func (f *egressFlags) wrap(cfg *node.Config, ifname string, log *slog.Logger) *egressRun {
	if f.policy == "" {
		return nil
	}
	r := &egressRun{f: f, ifname: ifname, log: log, counts: audit.NewCounter(nil), stop: func() {}}
	switch {
	case cfg.Device != nil:
		cfg.Device = &egressDevice{DeviceOpener: cfg.Device, r: r}
	case cfg.Provisioner != nil:
		cfg.Provisioner = &egressProvisioner{Provisioner: cfg.Provisioner, r: r}
	}
	return r
}

// egressProvisioner installs the filter once the interface is up.
type egressProvisioner struct {
	node.Provisioner
	r *egressRun
}

func (p *egressProvisioner) Up(ctx context.Context, addr netip.Prefix, mtu int) (tun.Device, error) {
	dev, err := p.Provisioner.Up(ctx, addr, mtu)
	if err != nil {
		return nil, err
	}
	if err := p.r.install(addr); err != nil {
		dev.Close()
		return nil, err
	}
	return dev, nil
}

// ServeDevice passes the inner provisioner's ability on (wg(8)'s UAPI
// socket).
func (p *egressProvisioner) ServeDevice(dev *device.Device, bind *node.Bind) (io.Closer, error) {
	if ds, ok := p.Provisioner.(node.DeviceServer); ok {
		return ds.ServeDevice(dev, bind)
	}
	return nopCloser{}, nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// egressDevice installs the filter once kernel WireGuard's interface exists.
type egressDevice struct {
	node.DeviceOpener
	r *egressRun
}

func (d *egressDevice) OpenDevice(ctx context.Context, addr netip.Prefix, mtu int, bind conn.Bind) (node.Device, error) {
	dev, err := d.DeviceOpener.OpenDevice(ctx, addr, mtu, bind)
	if err != nil {
		return nil, err
	}
	if err := d.r.install(addr); err != nil {
		dev.Close()
		return nil, err
	}
	return dev, nil
}

// install starts the enforcer for the overlay prefix addr is in.
func (r *egressRun) install(addr netip.Prefix) error {
	if r.enf != nil {
		return nil
	}
	cfg := egress.Config{
		Interface: r.ifname, Policy: r.f.policy, Backend: r.f.backend, FailClosed: r.f.failClosed, PinRoot: r.f.pinRoot,
		Overlay: addr.Masked(), Peers: r.peers, Logger: r.log,
	}
	if r.f.auditPath != "" {
		w, err := audit.Open(r.f.auditPath)
		if err != nil {
			return fmt.Errorf("egress audit log: %w", err)
		}
		r.audit, r.counts = w, audit.NewCounter(w)
	}
	// Decisions are audited even without a log (--state-dir mem:), so
	// that /metrics counts them.
	cfg.Audit = r.counts
	enf, err := egress.Start(cfg)
	if err != nil {
		if r.audit != nil {
			_ = r.audit.Close()
			r.audit = nil
		}
		return err
	}
	r.enf = enf
	return nil
}

// started reports the running node: its peers from now on, the audit
// log's start line and the SIGHUP handler.
func (r *egressRun) started(ctx context.Context, n *node.Node, out io.Writer) error {
	if r == nil {
		return nil
	}
	if r.enf == nil {
		return errors.New("egress: the interface came up without the egress filter")
	}
	r.node.Store(n)
	if err := r.enf.RefreshPeers(); err != nil {
		return err
	}
	if r.audit != nil {
		id := n.Identity()
		_ = r.audit.Write(audit.Event{Kind: "start", Detail: fmt.Sprintf("node %s (%s) on %s, egress %s, policy %s", id.Name, id.NodeID, r.ifname, r.enf.Backend(), r.enf.Policy().Source())})
	}
	fmt.Fprintf(out, "up: egress policy %s enforced on %s with %s\n", r.enf.Policy().Source(), r.ifname, r.enf.Backend())
	r.stop = reloadEgressOnHUP(ctx, r.enf)
	return nil
}

// EgressDecisions returns the kernel filter's decisions so far, by
// decision and rule.
func (r *egressRun) EgressDecisions() map[audit.Decision]uint64 { return r.counts.Decisions() }

// AuditFailures returns how many decisions the audit log failed to
// record.
func (r *egressRun) AuditFailures() uint64 { return r.counts.Failures() }

// close removes the filter and closes the audit log.
func (r *egressRun) close() error {
	if r == nil || r.enf == nil {
		return nil
	}
	r.stop()
	errs := []error{r.enf.Close()}
	if r.audit != nil {
		errs = append(errs, r.audit.Close())
	}
	return errors.Join(errs...)
}

// peers gives the enforcer the node's peers by name (none until the node
// is running: WireGuard has none either).
func (r *egressRun) peers() map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	n := r.node.Load()
	if n == nil {
		return out
	}
	for _, p := range n.Peers() {
		if p.Name != "" && p.Address.IsValid() {
			out[p.Name] = append(out[p.Name], p.Address.Addr())
		}
	}
	return out
}

// reloadEgressOnHUP re-reads the policy on SIGHUP until ctx ends or the
// returned stop is called.
func reloadEgressOnHUP(ctx context.Context, enf *egress.Enforcer) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-quit:
				return
			case <-hup:
				_ = enf.Reload() // logged; the policy in force stays
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

func newEgressCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "egress",
		Short: "Manage the egress filter 'lattice up --egress-policy' puts on the overlay interface",
		Args:  cobra.NoArgs,
	}
	var ifname, pinRoot string
	clear := &cobra.Command{
		Use:   "clear",
		Short: "Remove an egress filter a node left in the kernel (--egress-fail-closed, or a crash)",
		Long: `clear removes what 'lattice up --egress-policy' leaves on an interface when the
node dies without stopping (kill -9, a crash): with --egress-fail-closed the
pinned eBPF filter keeps denying, and the iptables chains LATTICE-IFNAME* stay
with either backend. The next 'lattice up' on the interface replaces them
without a gap; clear removes them for good. A node that stops cleanly removes
its filter itself.`,
		Example: "  sudo lattice egress clear --interface lattice0",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.CheckInterfaceName(ifname); err != nil {
				return err
			}
			removed, err := egress.Clear(ifname, pinRoot)
			for _, what := range removed {
				fmt.Fprintf(cmd.OutOrStdout(), "egress: removed the %s on %s\n", what, ifname)
			}
			if err != nil {
				return err
			}
			if len(removed) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "egress: no filter left on %s\n", ifname)
			}
			return nil
		},
	}
	clear.Flags().StringVar(&ifname, "interface", "lattice0", "the node's overlay interface")
	clear.Flags().StringVar(&pinRoot, "pin-root", egress.DefaultPinRoot, "bpffs directory of pinned filters")
	cmd.AddCommand(clear)
	return cmd
}
