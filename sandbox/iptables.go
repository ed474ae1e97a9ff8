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

// kernelEgress enforces an egress policy with the pod's iptables, for
// gvisor mode, where the agent's sockets are the pod kernel's. Its chain
// LATTICE-EGRESS judges what leaves through wg0 (the overlay): replies on
// established flows pass, then the policy's rules that can match overlay
// peers, in order, then REJECT. Metadata addresses are rejected on every
// interface unless the policy allows them. Peer names are resolved to
// addresses and the chain rebuilt when the peers change.
//
// The default-denied ranges (policy.DefaultDenied: loopback, unspecified,
// link-local, metadata, their NAT64 and 6to4 forms) and the pod's own
// addresses are rejected on every interface, IPv4 and IPv6, by the chain
// LATTICE-DEFAULTS (see defaultRules), unless a rule names them.
//
// Other rules about destinations outside the overlay are not enforced
// here: the node's own traffic (NATS, relay, STUN, WireGuard) shares the
// pod's other interfaces, so they belong to the pod's network policy.
//
// In the Pro edition, where the kernel runs it, the eBPF filter on wg0
// (egress/bpf) takes LATTICE-EGRESS's place: the same decisions, and every
// new connection, allowed or denied, reported through its ring buffer
// into the audit log, one line per connection. LATTICE-DEFAULTS stays:
// loopback and the pod's own addresses never leave by wg0.
type kernelEgress struct {
	iface string
	pol   *policy.Policy
	peers func() []nodePeer
	log   *slog.Logger
	self  netip.Addr // the sandbox's overlay address
	v6    bool       // the pod has IPv6, so ip6tables gets the defaults too
	// run runs an iptables tool with args and stdin; tests replace it.
	run func(tool string, args []string, stdin string) error
	// audit receives the eBPF filter's per-connection events; nil means
	// iptables only (tests).
	audit audit.Sink
	bpf   *bpf.Filter // the overlay's filter, when the kernel runs it

	mu        sync.Mutex // guards last and lastPeers
	last      []string   // the chain's rules as last installed
	lastPeers map[string][]netip.Addr
	stop      chan struct{}
	done      chan struct{}
	overlay   netip.Prefix

	hooked, hooked6, defaults, defaults6, following bool
}

const (
	egressChain   = "LATTICE-EGRESS"
	defaultsChain = "LATTICE-DEFAULTS"
)

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

// installOverlay puts the overlay's filter on wg0: eBPF where the kernel
// runs it, else the chain LATTICE-EGRESS.
func (k *kernelEgress) installOverlay() error {
	if k.audit != nil {
		f, err := bpf.New(bpf.Config{Interface: k.iface, Policy: k.pol.WithOverlay(k.overlay), Peers: k.peerMap(), ReportAllowed: true,
			OnEvent: bpf.AuditTo(k.audit, k.log), Logger: k.log})
		switch {
		case err == nil:
			k.bpf = f
			k.log.Info("gvisor mode: egress on wg0 by the eBPF filter; every connection is audited")
			return nil
		case errors.Is(err, bpf.ErrUnavailable) || errors.Is(err, edition.ErrProFeature):
			k.log.Warn("gvisor mode: eBPF egress filter unavailable; enforcing with iptables, without a per-connection audit", "err", err)
		default:
			return err
		}
	}
	_ = k.ipt("iptables", "-N", egressChain) // exists after a crash: flushed below
	if err := k.refresh(); err != nil {
		return err
	}
	if err := k.ipt("iptables", "-I", "OUTPUT", "-o", k.iface, "-j", egressChain); err != nil {
		return err
	}
	k.hooked = true
	return nil
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

// rules renders the chain for the current peers.
func (k *kernelEgress) rules() [][]string {
	peers := k.peers()
	overlayDst := func(r policy.RuleView) []string {
		switch r.Target {
		case policy.TargetPrefix:
			if r.NamesOverlay {
				return []string{r.Prefix.String()}
			}
		case policy.TargetAllPeers:
			return []string{k.overlay.String()}
		case policy.TargetPeer:
			var out []string
			for _, p := range peers {
				if strings.EqualFold(p.name, r.Peer) && p.addr.Is4() {
					out = append(out, netip.PrefixFrom(p.addr, 32).String())
				}
			}
			return out
		}
		return nil
	}
	out := [][]string{{"-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"}}
	for _, r := range k.pol.Rules() {
		target := "REJECT"
		if r.Allow {
			target = "ACCEPT"
		}
		for _, dst := range overlayDst(r) {
			out = append(out, iptables.RuleLines(r, false, target, "-d", dst)...)
		}
	}
	return append(out, []string{"-m", "comment", "--comment", "overlay peer not named", "-j", "REJECT"})
}

func (k *kernelEgress) refresh() error {
	if k.bpf != nil {
		peers := k.peerMap()
		k.mu.Lock()
		defer k.mu.Unlock()
		if maps.EqualFunc(peers, k.lastPeers, slices.Equal) {
			return nil
		}
		if err := k.bpf.Reload(k.pol.WithOverlay(k.overlay), peers); err != nil {
			return err
		}
		k.lastPeers = peers
		return nil
	}
	rules := k.rules()
	flat := make([]string, len(rules))
	for i, r := range rules {
		flat[i] = strings.Join(r, " ")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if slices.Equal(flat, k.last) {
		return nil
	}
	if err := k.restore("iptables-restore", egressChain, rules); err != nil {
		return err
	}
	k.last = flat
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
	if k.bpf != nil {
		if err := k.bpf.Close(); err != nil {
			k.log.Warn("eBPF egress filter not removed", "err", err)
		}
	}
	if k.hooked {
		_ = k.ipt("iptables", "-D", "OUTPUT", "-o", k.iface, "-j", egressChain)
	}
	if k.hooked6 {
		_ = k.ipt("ip6tables", "-D", "OUTPUT", "-o", k.iface, "-j", "REJECT", "-m", "comment", "--comment", "lattice overlay is ipv4")
	}
	_ = k.ipt("iptables", "-F", egressChain)
	_ = k.ipt("iptables", "-X", egressChain)
	k.removeDefaults()
}
