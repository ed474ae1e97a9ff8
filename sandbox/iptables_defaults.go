package sandbox

import (
	"net/netip"

	"github.com/latticelab/lattice/egress/iptables"
	"github.com/latticelab/lattice/policy"
)

// defaultRules renders LATTICE-DEFAULTS for one family: what Decide does
// for default-denied destinations (policy.DefaultDenied and the host's own
// addresses), as rules for the pod's OUTPUT hook. RETURN hands a packet
// on to the rest of OUTPUT (the overlay chain, the pod's own rules);
// REJECT refuses it at once.
//
// The ranges come most specific first, each followed by nothing but its
// own verdict, so an address meets the rules of the most specific range
// that holds it: the rules that name that range, in policy order, then
// its REJECT. That is Decide's order. The host's addresses are matched by
// addrtype LOCAL, which the kernel keeps current as addresses come and go;
// the sandbox's own overlay address is exempt, as the agent's own
// listeners are.
func defaultRules(pol *policy.Policy, self netip.Addr, v6 bool) [][]string {
	out := [][]string{{"-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"}}
	rules := pol.Rules()
	for _, d := range policy.DefaultDenied() {
		if d.Prefix.Addr().Is6() != v6 {
			continue
		}
		comment := []string{"-m", "comment", "--comment", "lattice default deny: " + d.Reason}
		if d.Metadata {
			verdict := "REJECT"
			if pol.AllowsMetadata() {
				// An ordinary destination now, not a link-local one.
				verdict = "RETURN"
			}
			out = append(out, append(append([]string{"-d", d.Prefix.String()}, comment...), "-j", verdict))
			continue
		}
		for _, r := range rules {
			if r.Target == policy.TargetPrefix && policy.Names(r.Prefix, d.Prefix) {
				out = append(out, iptables.RuleLines(r, v6, verdict(r), "-d", r.Prefix.String())...)
			}
		}
		out = append(out, append(append([]string{"-d", d.Prefix.String()}, comment...), "-j", "REJECT"))
	}
	if self.IsValid() && self.Is6() == v6 {
		out = append(out, []string{"-d", netip.PrefixFrom(self, self.BitLen()).String(), "-m", "comment", "--comment", "lattice own overlay address", "-j", "RETURN"})
	}
	for _, r := range rules {
		if r.Target == policy.TargetPrefix && r.Prefix.IsSingleIP() && r.Prefix.Addr().Is6() == v6 {
			out = append(out, iptables.RuleLines(r, v6, verdict(r), "-d", r.Prefix.String(), "-m", "addrtype", "--dst-type", "LOCAL")...)
		}
	}
	return append(out, []string{"-m", "addrtype", "--dst-type", "LOCAL", "-m", "comment", "--comment", "lattice default deny: " + policy.ReasonHostAddress, "-j", "REJECT"})
}

func verdict(r policy.RuleView) string {
	if r.Allow {
		return "RETURN"
	}
	return "REJECT"
}

// family is one IP family's iptables tools.
type family struct {
	ipt, restore string
	v6           bool
}

// families lists the families the pod has.
func (k *kernelEgress) families() []family {
	fs := []family{{"iptables", "iptables-restore", false}}
	if k.v6 {
		fs = append(fs, family{"ip6tables", "ip6tables-restore", true})
	}
	return fs
}

// installDefaults fills LATTICE-DEFAULTS in each family and hooks it first
// in OUTPUT, so it sees every packet the pod sends.
func (k *kernelEgress) installDefaults() error {
	for _, f := range k.families() {
		// The chain and its hook in one transaction: one process each, on
		// the sandbox's start path, and never a chain without its hook.
		if err := k.restore(f.restore, defaultsChain, defaultRules(k.pol, k.self, f.v6), "-I OUTPUT 1 -j "+defaultsChain); err != nil {
			return err
		}
		if f.v6 {
			k.defaults6 = true
		} else {
			k.defaults = true
		}
	}
	return nil
}

// removeDefaults undoes installDefaults, also after a partial one.
func (k *kernelEgress) removeDefaults() {
	for _, f := range k.families() {
		if f.v6 && !k.defaults6 || !f.v6 && !k.defaults {
			continue
		}
		script := "*filter\n-D OUTPUT -j " + defaultsChain + "\n-F " + defaultsChain + "\n-X " + defaultsChain + "\nCOMMIT\n"
		if k.run(f.restore, []string{"--noflush", "-w", "5"}, script) == nil {
			continue
		}
		// Not all there (someone removed a part): each step on its own.
		_ = k.ipt(f.ipt, "-D", "OUTPUT", "-j", defaultsChain)
		_ = k.ipt(f.ipt, "-F", defaultsChain)
		_ = k.ipt(f.ipt, "-X", defaultsChain)
	}
}
