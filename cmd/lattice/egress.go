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
	"syscall"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/egress"
	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/node"
)

// egressFlags are `lattice up`'s egress policy flags.
type egressFlags struct {
	policy, backend, auditLog, pinRoot string
	failClosed                         bool
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
func (f *egressFlags) check(cmd *cobra.Command, userspace bool) error {
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
	if _, err := os.Stat(f.policy); err != nil {
		return usagef("--egress-policy: %v", err)
	}
	return nil
}

// egressRun is a running egress policy: the enforcer, its audit log and
// the SIGHUP handler.
type egressRun struct {
	enf   *egress.Enforcer
	audit *audit.FileWriter
	stop  func()
}

// start enforces the policy on ifname for node n; nil without a policy.
func (f *egressFlags) start(ctx context.Context, n *node.Node, ifname, stateDir string, out io.Writer, log *slog.Logger) (*egressRun, error) {
	if f.policy == "" {
		return nil, nil
	}
	path := f.auditLog
	if path == "" && stateDir != "mem:" {
		path = filepath.Join(stateDir, "audit.jsonl")
	}
	r := &egressRun{stop: func() {}}
	cfg := egress.Config{
		Interface: ifname, Policy: f.policy, Backend: f.backend, FailClosed: f.failClosed, PinRoot: f.pinRoot,
		Overlay: n.Address().Masked(), Peers: nodePeers(n), Logger: log,
	}
	if path != "" {
		w, err := audit.Open(path)
		if err != nil {
			return nil, fmt.Errorf("egress audit log: %w", err)
		}
		r.audit, cfg.Audit = w, w
	}
	enf, err := egress.Start(cfg)
	if err != nil {
		if r.audit != nil {
			_ = r.audit.Close()
		}
		return nil, err
	}
	r.enf = enf
	if r.audit != nil {
		id := n.Identity()
		_ = r.audit.Write(audit.Event{Kind: "start", Detail: fmt.Sprintf("node %s (%s) on %s, egress %s, policy %s", id.Name, id.NodeID, ifname, enf.Backend(), enf.Policy().Source())})
	}
	fmt.Fprintf(out, "up: egress policy %s enforced on %s with %s\n", enf.Policy().Source(), ifname, enf.Backend())
	r.stop = reloadEgressOnHUP(ctx, enf)
	return r, nil
}

// close removes the filter and closes the audit log.
func (r *egressRun) close() error {
	if r == nil {
		return nil
	}
	r.stop()
	errs := []error{r.enf.Close()}
	if r.audit != nil {
		errs = append(errs, r.audit.Close())
	}
	return errors.Join(errs...)
}

// nodePeers gives the enforcer the node's peers by name.
func nodePeers(n *node.Node) func() map[string][]netip.Addr {
	return func() map[string][]netip.Addr {
		out := map[string][]netip.Addr{}
		for _, p := range n.Peers() {
			if p.Name != "" && p.Address.IsValid() {
				out[p.Name] = append(out[p.Name], p.Address.Addr())
			}
		}
		return out
	}
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
