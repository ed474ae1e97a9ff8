package sandbox

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

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
// Rules about destinations outside the overlay are not enforced here:
// the node's own traffic (NATS, relay, STUN, WireGuard) shares the pod's
// other interfaces, so they belong to the pod's network policy.
type kernelEgress struct {
	iface string
	pol   *policy.Policy
	peers func() []nodePeer
	log   *slog.Logger

	mu      sync.Mutex // guards last
	last    []string   // the chain's rules as last installed
	stop    chan struct{}
	done    chan struct{}
	overlay netip.Prefix

	hooked, metaSet, following bool
}

const egressChain = "LATTICE-EGRESS"

func ipt(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func newKernelEgress(iface string, overlay netip.Prefix, pol *policy.Policy, peers func() []nodePeer, log *slog.Logger) *kernelEgress {
	return &kernelEgress{iface: iface, overlay: overlay, pol: pol, peers: peers, log: log, stop: make(chan struct{}), done: make(chan struct{})}
}

// install creates the chain, hooks it and starts following peer changes.
func (k *kernelEgress) install() error {
	for _, tool := range []string{"iptables", "iptables-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("sandbox: gvisor mode enforces egress with %s, which is not installed (apt-get install iptables)", tool)
		}
	}
	_ = ipt("-N", egressChain) // exists after a crash: flushed below
	if err := k.refresh(); err != nil {
		return err
	}
	if err := ipt("-I", "OUTPUT", "-o", k.iface, "-j", egressChain); err != nil {
		return err
	}
	k.hooked = true
	if !k.pol.AllowsMetadata() {
		for _, a := range policy.MetadataAddrs() {
			if a.Is4() {
				if err := ipt("-I", "OUTPUT", "-d", a.String(), "-j", "REJECT", "-m", "comment", "--comment", "lattice metadata"); err != nil {
					return err
				}
			}
		}
		k.metaSet = true
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
		target := []string{"-j", "REJECT"}
		if r.Allow {
			target = []string{"-j", "ACCEPT"}
		}
		protos := []string{""}
		switch {
		case r.Proto == policy.TCP:
			protos = []string{"tcp"}
		case r.Proto == policy.UDP:
			protos = []string{"udp"}
		case r.Proto == policy.ICMP:
			protos = []string{"icmp"}
		case len(r.Ports) > 0:
			protos = []string{"tcp", "udp"}
		}
		for _, dst := range overlayDst(r) {
			for _, proto := range protos {
				rule := []string{"-d", dst}
				if proto != "" {
					rule = append(rule, "-p", proto)
				}
				if len(r.Ports) > 0 {
					var ps []string
					for _, pr := range r.Ports {
						if pr[0] == pr[1] {
							ps = append(ps, fmt.Sprint(pr[0]))
						} else {
							ps = append(ps, fmt.Sprintf("%d:%d", pr[0], pr[1]))
						}
					}
					rule = append(rule, "-m", "multiport", "--dports", strings.Join(ps, ","))
				}
				rule = append(rule, "-m", "comment", "--comment", clipComment(r.Label))
				out = append(out, append(rule, target...))
			}
		}
	}
	return append(out, []string{"-m", "comment", "--comment", "overlay peer not named", "-j", "REJECT"})
}

// clipComment fits a label into iptables' 256-byte comment.
func clipComment(s string) string {
	if len(s) > 250 {
		return s[:250]
	}
	return s
}

func (k *kernelEgress) refresh() error {
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
	// One iptables-restore transaction replaces the chain's rules: a
	// flush and re-append would leave it empty, allowing everything, in
	// between.
	var b strings.Builder
	b.WriteString("*filter\n:" + egressChain + " - [0:0]\n")
	for _, r := range rules {
		b.WriteString("-A " + egressChain)
		for _, arg := range r {
			b.WriteString(" " + restoreQuote(arg))
		}
		b.WriteString("\n")
	}
	b.WriteString("COMMIT\n")
	cmd := exec.Command("iptables-restore", "--noflush", "-w", "5")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore of %s: %w: %s", egressChain, err, strings.TrimSpace(string(out)))
	}
	k.last = flat
	return nil
}

// restoreQuote quotes an argument for iptables-restore's line parser.
func restoreQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\"'\\#") {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
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
	if k.hooked {
		_ = ipt("-D", "OUTPUT", "-o", k.iface, "-j", egressChain)
	}
	if k.metaSet {
		for _, a := range policy.MetadataAddrs() {
			if a.Is4() {
				_ = ipt("-D", "OUTPUT", "-d", a.String(), "-j", "REJECT", "-m", "comment", "--comment", "lattice metadata")
			}
		}
	}
	_ = ipt("-F", egressChain)
	_ = ipt("-X", egressChain)
}
