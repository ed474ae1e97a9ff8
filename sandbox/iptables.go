package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"

	"github.com/latticelab/lattice/audit"
	enforce "github.com/latticelab/lattice/egress"
	"github.com/latticelab/lattice/egress/bpf"
	"github.com/latticelab/lattice/egress/iptables"
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
// filters reloaded when the peers change: an egress.Enforcer keeps them
// current, as it does `lattice up --egress-policy`'s, with a fixed policy
// and this layered filter (egress.Config.NewFilter).
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
	// ahead is the eBPF filter being made ahead (loadBPF), if the caller
	// started it; install starts one otherwise. install attaches it and
	// remove closes it unless the overlay filter took it.
	ahead    *bpfAhead
	enforcer *enforce.Enforcer // keeps wg0's filter current, once installed
	overlay  netip.Prefix

	hooked6, defaults, defaults6 bool
}

const defaultsChain = "LATTICE-DEFAULTS"

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
		run: runTool}
}

// install creates the chains, hooks them and starts following peer
// changes (the Enforcer's ticker, once a second). The defaults go in
// first: until they are hooked no other chain is. The eBPF filter on
// wg0 (which only ever refuses more) attaches meanwhile, and is in place
// when install returns.
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
	if !k.iptablesOnly {
		// The eBPF filter's attach waits for the kernel (an RCU grace
		// period) while the chains below go in.
		if k.ahead == nil {
			k.ahead = loadBPF(bpfConfig(k.iface, k.pol, k.audit, k.log))
		}
		k.ahead.attach(k.pol.WithOverlay(k.overlay), k.peerMap())
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
	return nil
}

// installOverlay puts the overlay's filters on wg0: egress/iptables'
// chains, whose REJECT refuses a denied connect at once (a TCX drop would
// leave the agent waiting for its timeout) and whose NFLOG audits it,
// and, where the kernel runs it, the eBPF filter behind them (TCX egress
// comes after netfilter's OUTPUT), which reports each allowed connection
// through its ring buffer; without it the chains report those too.
func (k *kernelEgress) installOverlay() error {
	e, err := enforce.Start(enforce.Config{Interface: k.iface, Fixed: k.pol, Overlay: k.overlay, Peers: k.peerMap,
		NewFilter: k.newOverlayFilter, Logger: k.log})
	if err != nil {
		return err
	}
	k.enforcer = e
	return nil
}

// newOverlayFilter builds wg0's layered filter for the Enforcer. The
// iptables chains go in while the eBPF filter attaches (install started
// it); they report allowed connections only without it, so in the rare
// case it turns out unavailable they are made again to report them.
func (k *kernelEgress) newOverlayFilter(pol *policy.Policy, peers map[string][]netip.Addr) (enforce.Filter, error) {
	var ebpf *bpf.Filter
	pending := false
	take := func() error {
		f, err := k.ahead.result()
		switch {
		case err == nil:
			ebpf = f
			// Peers that changed since install started the attach.
			return f.Reload(pol, peers)
		case fallBack(err):
			k.log.Warn("gvisor mode: eBPF egress filter unavailable; enforcing with iptables, connections audited through NFLOG", "err", err)
			return nil
		}
		return err
	}
	if !k.iptablesOnly {
		if k.ahead == nil {
			k.ahead = loadBPF(bpfConfig(k.iface, k.pol, k.audit, k.log))
		}
		k.ahead.attach(pol, peers) // if install did not
		if pending = !k.ahead.done(); !pending {
			if err := take(); err != nil {
				return nil, k.closeFilters(ebpf, nil, err)
			}
		}
	}
	ipt, err := k.newIptables(pol, peers, k.iptablesOnly || !pending && ebpf == nil)
	if pending {
		if err := errors.Join(err, take()); err != nil {
			return nil, k.closeFilters(ebpf, ipt, err)
		}
		if ebpf == nil {
			// Made to leave reporting to the eBPF filter, which is not there.
			_ = ipt.Close()
			ipt, err = k.newIptables(pol, peers, true)
		}
	}
	if err != nil {
		return nil, k.closeFilters(ebpf, nil, err)
	}
	if ebpf == nil {
		return layered{ipt}, nil
	}
	k.log.Info("gvisor mode: egress on wg0 by the eBPF filter behind iptables' REJECT; every connection is audited")
	return layered{ebpf, ipt}, nil
}

// newIptables makes wg0's iptables filter; reportAllowed has it report
// allowed connections too (without the eBPF filter).
func (k *kernelEgress) newIptables(pol *policy.Policy, peers map[string][]netip.Addr, reportAllowed bool) (*iptables.Filter, error) {
	cfg := iptables.Config{Interface: k.iface, Policy: pol, Peers: peers, IPv6: &k.v6, Run: k.run, ReportAllowed: reportAllowed, Logger: k.log}
	if k.audit != nil {
		cfg.OnEvent = iptables.AuditTo(k.audit, k.iface, k.log)
	}
	return iptables.New(cfg)
}

// closeFilters closes what a failed newOverlayFilter made and returns err.
func (k *kernelEgress) closeFilters(ebpf *bpf.Filter, ipt *iptables.Filter, err error) error {
	if ebpf != nil {
		_ = ebpf.Close()
	}
	if ipt != nil {
		_ = ipt.Close()
	}
	return err
}

// bpfConfig is wg0's eBPF filter's configuration: it reports allowed
// connections (iptables' REJECT in front of it reports the denied ones),
// to sink if not nil.
func bpfConfig(iface string, pol *policy.Policy, sink audit.Sink, log *slog.Logger) bpf.Config {
	cfg := bpf.Config{Interface: iface, Policy: pol, ReportAllowed: true, Logger: log}
	if sink != nil {
		cfg.OnEvent = bpf.AuditTo(sink, log)
	}
	return cfg
}

// layered is several filters on one interface, reloaded and closed
// together.
type layered []enforce.Filter

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

// refresh reloads wg0's filter now if the peers changed, rather than at
// the Enforcer's next tick.
func (k *kernelEgress) refresh() error {
	if k.enforcer == nil {
		return nil
	}
	return k.enforcer.RefreshPeers()
}

// restore replaces chain's rules in one iptables-restore transaction: a
// flush and re-append would leave it empty, allowing everything, in
// between. The chain is created if it does not exist. more are further
// lines of the same transaction (a hook into a built-in chain).
func (k *kernelEgress) restore(tool, chain string, rules [][]string, more ...string) error {
	var b strings.Builder
	b.WriteString("*filter\n:" + chain + " - [0:0]\n")
	for _, r := range rules {
		b.WriteString("-A " + chain)
		for _, arg := range r {
			b.WriteString(" " + iptables.Quote(arg))
		}
		b.WriteString("\n")
	}
	for _, l := range more {
		b.WriteString(l + "\n")
	}
	b.WriteString("COMMIT\n")
	if err := k.run(tool, []string{"--noflush", "-w", "5"}, b.String()); err != nil {
		return fmt.Errorf("%s of %s: %w", tool, chain, err)
	}
	return nil
}

// remove undoes install; it is safe after a partial install.
func (k *kernelEgress) remove() {
	if k.enforcer != nil {
		if err := k.enforcer.Close(); err != nil {
			k.log.Warn("egress filter on wg0 not removed", "err", err)
		}
	}
	if k.ahead != nil {
		k.ahead.close() // unless the overlay filter took it
	}
	if k.hooked6 {
		_ = k.ipt("ip6tables", "-D", "OUTPUT", "-o", k.iface, "-j", "REJECT", "-m", "comment", "--comment", "lattice overlay is ipv4")
	}
	k.removeDefaults()
}
