package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/egress/bpf"
	"github.com/latticelab/lattice/egress/iptables"
	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/policy"
)

// kernelEgress enforces an egress policy in the pod's kernel, for gvisor
// mode, where the agent's sockets are the pod kernel's. What leaves
// through wg0 (the overlay) is judged by Decide's semantics, by
// egress/iptables' chains LATTICE-wg0* (hooked on OUTPUT and FORWARD -o
// wg0; their REJECT refuses a denied connect at once) and, in the Pro
// edition where the kernel runs it, the eBPF filter (egress/bpf) on wg0's
// egress behind them. Every new connection is one line of the audit log:
// denied ones through NFLOG, allowed ones through the eBPF ring buffer
// (NFLOG too without it). Peer names are resolved to addresses and the
// filters reloaded when the peers change.
//
// The default-denied ranges (policy.DefaultDenied: loopback, unspecified,
// link-local, metadata, their NAT64 and 6to4 forms) and the pod's own
// addresses are rejected on every interface, IPv4 and IPv6, by the chain
// LATTICE-DEFAULTS (see defaultRules), unless a rule names them.
//
// Other rules about destinations outside the overlay are not enforced
// here: the node's own traffic (NATS, relay, STUN, WireGuard) shares the
// pod's other interfaces, so they belong to the pod's network policy.
// LATTICE-DEFAULTS stays beside either: loopback and the pod's own
// addresses never leave by wg0.
type kernelEgress struct {
	iface string
	pol   *policy.Policy
	peers func() []nodePeer
	log   *slog.Logger
	self  netip.Addr // the sandbox's overlay address
	v6    bool       // the pod has IPv6, so ip6tables gets the defaults too
	// run runs an iptables tool with args and stdin; tests replace it.
	run func(tool string, args []string, stdin string) error
	// audit receives the overlay filter's per-connection events; nil
	// audits nothing.
	audit audit.Sink
	// iptablesOnly skips the eBPF filter, which is otherwise used where
	// the kernel runs it.
	iptablesOnly bool
	overlayF     overlayFilter // wg0's filter, once installed

	mu        sync.Mutex // guards lastPeers
	lastPeers map[string][]netip.Addr
	stop      chan struct{}
	done      chan struct{}
	overlay   netip.Prefix

	hooked6, defaults, defaults6, following bool
}

const defaultsChain = "LATTICE-DEFAULTS"

// overlayFilter is wg0's filter: egress/bpf's or egress/iptables'.
type overlayFilter interface {
	// Reload replaces the policy and the peers at once; on error the old
	// rules stay.
	Reload(p *policy.Policy, peers map[string][]netip.Addr) error
	// Close removes the filter.
	Close() error
}

func (k *kernelEgress) ipt(tool string, args ...string) error {
	return k.run(tool, append([]string{"-w", "5"}, args...), "")
}

// runTool runs an iptables tool for real.
func runTool(tool string, args []string, stdin string) error {
	cmd := exec.Command(tool, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func newKernelEgress(iface string, self netip.Prefix, pol *policy.Policy, peers func() []nodePeer, log *slog.Logger) *kernelEgress {
	_, err := os.Stat("/proc/net/if_inet6")
	return &kernelEgress{iface: iface, overlay: self.Masked(), self: self.Addr(), pol: pol, peers: peers, log: log, v6: err == nil,
		run: runTool, stop: make(chan struct{}), done: make(chan struct{})}
}

// install creates the chains, hooks them and starts following peer
// changes. The defaults go in first: until they are hooked nothing else is.
func (k *kernelEgress) install() error {
	tools := []string{"iptables", "iptables-restore"}
	if k.v6 {
		tools = append(tools, "ip6tables", "ip6tables-restore")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("sandbox: gvisor mode enforces egress with %s, which is not installed (apt-get install iptables)", tool)
		}
	}
	if err := k.installDefaults(); err != nil {
		return err
	}
	if err := k.installOverlay(); err != nil {
		return err
	}
	if k.v6 {
		// The overlay is IPv4: nothing of the agent's leaves wg0 as IPv6.
		if err := k.ipt("ip6tables", "-I", "OUTPUT", "-o", k.iface, "-j", "REJECT", "-m", "comment", "--comment", "lattice overlay is ipv4"); err != nil {
			return err
		}
		k.hooked6 = true
	}
	if !k.pol.DefaultAllows() {
		k.log.Warn("gvisor mode: the policy's default deny applies to overlay peers only; outside the overlay use the pod's network policy")
	}
	for _, r := range k.pol.Rules() {
		if (r.Target == policy.TargetAny || r.Target == policy.TargetPrefix && !r.NamesOverlay) && r.Label != "" {
			k.log.Warn("gvisor mode: rule about destinations outside the overlay is not enforced; use the pod's network policy", "rule", r.Label)
		}
	}
	k.following = true
	go k.follow()
	return nil
}

// installOverlay puts the overlay's filters on wg0: egress/iptables'
// chains, whose REJECT refuses a denied connect at once (a TCX drop would
// leave the agent waiting for its timeout) and whose NFLOG audits it,
// and, where the kernel runs it, the eBPF filter behind them (TCX egress
// comes after netfilter's OUTPUT), which reports each allowed connection
// through its ring buffer; without it the chains report those too.
func (k *kernelEgress) installOverlay() error {
	pol, peers := k.pol.WithOverlay(k.overlay), k.peerMap()
	var filters layered
	if !k.iptablesOnly {
		cfg := bpf.Config{Interface: k.iface, Policy: pol, Peers: peers, ReportAllowed: true, Logger: k.log}
		if k.audit != nil {
			cfg.OnEvent = bpf.AuditTo(k.audit, k.log)
		}
		f, err := bpf.New(cfg)
		switch {
		case err == nil:
			filters = append(filters, f)
		case errors.Is(err, bpf.ErrUnavailable) || errors.Is(err, edition.ErrProFeature):
			k.log.Warn("gvisor mode: eBPF egress filter unavailable; enforcing with iptables, connections audited through NFLOG", "err", err)
		default:
			return err
		}
	}
	cfg := iptables.Config{Interface: k.iface, Policy: pol, Peers: peers, IPv6: &k.v6, Run: k.run, ReportAllowed: len(filters) == 0, Logger: k.log}
	if k.audit != nil {
		cfg.OnEvent = iptables.AuditTo(k.audit, k.iface, k.log)
	}
	f, err := iptables.New(cfg)
	if err != nil {
		_ = filters.Close()
		return err
	}
	if len(filters) > 0 {
		k.log.Info("gvisor mode: egress on wg0 by the eBPF filter behind iptables' REJECT; every connection is audited")
	}
	k.overlayF, k.lastPeers = append(filters, f), peers
	return nil
}

// layered is several filters on one interface, reloaded and closed
// together.
type layered []overlayFilter

func (l layered) Reload(p *policy.Policy, peers map[string][]netip.Addr) error {
	var errs []error
	for _, f := range l {
		errs = append(errs, f.Reload(p, peers))
	}
	return errors.Join(errs...)
}

func (l layered) Close() error {
	var errs []error
	for _, f := range l {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// peerMap is the peers by name, for the eBPF filter.
func (k *kernelEgress) peerMap() map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for _, p := range k.peers() {
		if p.name != "" && p.addr.IsValid() {
			out[p.name] = append(out[p.name], p.addr)
		}
	}
	return out
}

// follow rebuilds the chain when the peers change.
func (k *kernelEgress) follow() {
	defer close(k.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			if err := k.refresh(); err != nil {
				k.log.Warn("egress rules not updated", "err", err)
			}
		}
	}
}

// refresh reloads wg0's filter if the peers changed.
func (k *kernelEgress) refresh() error {
	if k.overlayF == nil {
		return nil
	}
	peers := k.peerMap()
	k.mu.Lock()
	defer k.mu.Unlock()
	if maps.EqualFunc(peers, k.lastPeers, slices.Equal) {
		return nil
	}
	if err := k.overlayF.Reload(k.pol.WithOverlay(k.overlay), peers); err != nil {
		return err
	}
	k.lastPeers = peers
	return nil
}

// restore replaces chain's rules in one iptables-restore transaction: a
// flush and re-append would leave it empty, allowing everything, in
// between. The chain is created if it does not exist.
func (k *kernelEgress) restore(tool, chain string, rules [][]string) error {
	var b strings.Builder
	b.WriteString("*filter\n:" + chain + " - [0:0]\n")
	for _, r := range rules {
		b.WriteString("-A " + chain)
		for _, arg := range r {
			b.WriteString(" " + iptables.Quote(arg))
		}
		b.WriteString("\n")
	}
	b.WriteString("COMMIT\n")
	if err := k.run(tool, []string{"--noflush", "-w", "5"}, b.String()); err != nil {
		return fmt.Errorf("%s of %s: %w", tool, chain, err)
	}
	return nil
}

// remove undoes install; it is safe after a partial install.
func (k *kernelEgress) remove() {
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	if k.following {
		<-k.done
	}
	if k.overlayF != nil {
		if err := k.overlayF.Close(); err != nil {
			k.log.Warn("egress filter on wg0 not removed", "err", err)
		}
	}
	if k.hooked6 {
		_ = k.ipt("ip6tables", "-D", "OUTPUT", "-o", k.iface, "-j", "REJECT", "-m", "comment", "--comment", "lattice overlay is ipv4")
	}
	k.removeDefaults()
}
