package iptables

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/latticelab/lattice/policy"
)

// Input is what rendering needs besides the policy.
type Input struct {
	// Chain is the main chain's name; the sub-chains are Chain+"-D"
	// (decide), Chain+"-P" (overlay peers) and Chain+"-R" (other rules).
	Chain string
	// Peers maps lower-case overlay node names to their addresses, for
	// peer:NAME rules.
	Peers map[string][]netip.Addr
	// V6 renders the IPv6 family (ip6tables); otherwise IPv4.
	V6 bool
	// LogGroup, if not zero, logs every packet a rule rejects to this
	// NFLOG group, and with LogAllowed every allowed new connection
	// (conntrack NEW), prefixed "lattice:Gen:ID:V" (see Chains.Labels).
	LogGroup   uint16
	LogAllowed bool
	Gen        uint32
}

// Chains are one family's rules, chain by chain, in the order they are
// declared.
type Chains struct {
	Names []string
	Rules map[string][][]string
	// Labels are the rules' labels by the ID the log prefixes carry.
	Labels []string
}

// Render translates p into one family's chains with Policy.Decide's
// semantics for a packet leaving the overlay interface, a destination
// being an overlay destination when it lies within p.Overlay():
//
//	Chain:   replies on established flows RETURN; TCP, UDP and ICMP go
//	         (-g) to Chain-D; anything else is REJECTed "invalid destination".
//	Chain-D: metadata addresses REJECT (or, with allow_metadata, go on as
//	         ordinary destinations); each other default-denied range is
//	         opened only by the rules that name it, in order, then REJECTed;
//	         overlay destinations go to Chain-P, the rest to Chain-R.
//	Chain-P: the rules naming overlay peers, then "overlay peer not named".
//	Chain-R: the other rules, then the default.
//
// Allowing is RETURN, and the sub-chains are entered with -g (goto), so
// an allowed packet goes back to the hook that called Chain and on to the
// host's own rules: the policy only ever takes away.
func Render(p *policy.Policy, in Input) Chains {
	c := render(p, in)
	if in.LogGroup != 0 {
		c.addLogging(in)
	}
	return c
}

func render(p *policy.Policy, in Input) Chains {
	d, peers, rest := in.Chain+"-D", in.Chain+"-P", in.Chain+"-R"
	c := Chains{Names: []string{in.Chain, d, peers, rest}, Rules: map[string][][]string{}}
	icmp := "icmp"
	if in.V6 {
		icmp = "ipv6-icmp"
	}
	main := [][]string{{"-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"}}
	if in.V6 {
		// Router and neighbour discovery are the link's business.
		for _, typ := range []string{"133", "134", "135", "136", "137"} {
			main = append(main, []string{"-p", icmp, "--icmpv6-type", typ, "-j", "RETURN"})
		}
	}
	for _, proto := range []string{"tcp", "udp", icmp} {
		main = append(main, []string{"-p", proto, "-g", d})
	}
	c.Rules[in.Chain] = append(main, reject("invalid destination"))
	if p == nil {
		c.Rules[d] = [][]string{reject("no policy")}
		c.Rules[peers] = [][]string{reject("no policy")}
		c.Rules[rest] = [][]string{reject("no policy")}
		return c
	}
	rules := p.Rules()
	ov := p.Overlay()
	ovFamily := ov.IsValid() && ov.Addr().Is6() == in.V6
	c.Rules[d] = decide(p, rules, in.V6, ovFamily, ov, peers, rest)

	var pr [][]string
	if ovFamily {
		for _, r := range rules {
			for _, dst := range overlayDsts(r, ov, in.Peers, in.V6) {
				pr = append(pr, RuleLines(r, in.V6, verdict(r), "-d", dst)...)
			}
		}
	}
	c.Rules[peers] = append(pr, reject("overlay peer not named"))

	var rr [][]string
	for _, r := range rules {
		switch {
		case r.Target == policy.TargetAny:
			rr = append(rr, RuleLines(r, in.V6, verdict(r))...)
		case r.Target == policy.TargetPrefix && !r.NamesOverlay && r.Prefix.Addr().Is6() == in.V6:
			rr = append(rr, RuleLines(r, in.V6, verdict(r), "-d", r.Prefix.String())...)
		}
	}
	if p.DefaultAllows() {
		rr = append(rr, []string{"-m", "comment", "--comment", "default allow", "-j", "RETURN"})
	} else {
		rr = append(rr, reject("default deny"))
	}
	c.Rules[rest] = rr
	return c
}

// addLogging puts before each verdict rule that names its reason (a
// comment) the same match jumping to NFLOG: REJECTs always, RETURNs of
// new connections with LogAllowed.
func (c *Chains) addLogging(in Input) {
	ids := map[string]int{}
	for _, name := range c.Names {
		var out [][]string
		for _, r := range c.Rules[name] {
			n := len(r)
			if n < 6 || r[n-2] != "-j" || r[n-6] != "-m" || r[n-5] != "comment" || (r[n-1] != "REJECT" && r[n-1] != "RETURN") {
				out = append(out, r)
				continue
			}
			allow := r[n-1] == "RETURN"
			if allow && !in.LogAllowed {
				out = append(out, r)
				continue
			}
			label := r[n-3]
			id, ok := ids[label]
			if !ok {
				id = len(c.Labels)
				ids[label] = id
				c.Labels = append(c.Labels, label)
			}
			log := slices.Clone(r[:n-6])
			if allow {
				log = append(log, "-m", "conntrack", "--ctstate", "NEW")
			}
			log = append(log, "-j", "NFLOG", "--nflog-group", fmt.Sprint(in.LogGroup), "--nflog-prefix", logPrefix(in.Gen, id, allow))
			out = append(out, log, r)
		}
		c.Rules[name] = out
	}
}

// decide renders Chain-D: the default-denied ranges, most specific first
// (policy.DefaultDenied's order), then the overlay/other split.
func decide(p *policy.Policy, rules []policy.RuleView, v6, ovFamily bool, ov netip.Prefix, peers, rest string) [][]string {
	var out [][]string
	for _, d := range policy.DefaultDenied() {
		if d.Prefix.Addr().Is6() != v6 {
			continue
		}
		if d.Metadata {
			if !p.AllowsMetadata() {
				out = append(out, append([]string{"-d", d.Prefix.String()}, reject(d.Reason)...))
				continue
			}
			// An ordinary destination now, not one of the range it lies in.
			next := rest
			if ovFamily && ov.Contains(d.Prefix.Addr()) {
				next = peers
			}
			out = append(out, []string{"-d", d.Prefix.String(), "-g", next})
			continue
		}
		for _, r := range rules {
			if r.Target == policy.TargetPrefix && policy.Names(r.Prefix, d.Prefix) {
				out = append(out, RuleLines(r, v6, verdict(r), "-d", r.Prefix.String())...)
			}
		}
		out = append(out, append([]string{"-d", d.Prefix.String()}, reject(d.Reason)...))
	}
	if ovFamily {
		out = append(out, []string{"-d", ov.String(), "-g", peers})
	}
	return append(out, []string{"-g", rest})
}

// overlayDsts is where r applies among overlay destinations.
func overlayDsts(r policy.RuleView, ov netip.Prefix, peers map[string][]netip.Addr, v6 bool) []string {
	switch r.Target {
	case policy.TargetPrefix:
		if r.NamesOverlay {
			return []string{r.Prefix.String()}
		}
	case policy.TargetAllPeers:
		return []string{ov.String()}
	case policy.TargetPeer:
		var out []string
		for _, a := range peers[strings.ToLower(r.Peer)] {
			a = a.Unmap()
			if a.Is6() == v6 && ov.Contains(a) {
				out = append(out, netip.PrefixFrom(a, a.BitLen()).String())
			}
		}
		return out
	}
	return nil
}

func reject(why string) []string {
	return []string{"-m", "comment", "--comment", Comment(why), "-j", "REJECT"}
}

func verdict(r policy.RuleView) string {
	if r.Allow {
		return "RETURN"
	}
	return "REJECT"
}

// RuleLines renders r's protocol and ports after match, one line per
// protocol, each jumping to target, with r's label as the comment. A rule
// with ports and no protocol is two lines, TCP and UDP: ports never match
// ICMP.
func RuleLines(r policy.RuleView, v6 bool, target string, match ...string) [][]string {
	protos := []string{""}
	switch {
	case r.Proto == policy.TCP:
		protos = []string{"tcp"}
	case r.Proto == policy.UDP:
		protos = []string{"udp"}
	case r.Proto == policy.ICMP && v6:
		protos = []string{"ipv6-icmp"}
	case r.Proto == policy.ICMP:
		protos = []string{"icmp"}
	case len(r.Ports) > 0:
		protos = []string{"tcp", "udp"}
	}
	chunks := [][]string{nil}
	if len(r.Ports) > 0 {
		chunks = portMatches(r.Ports)
	}
	var out [][]string
	for _, proto := range protos {
		for _, ports := range chunks {
			rule := slices.Clone(match)
			if proto != "" {
				rule = append(rule, "-p", proto)
			}
			rule = append(rule, ports...)
			rule = append(rule, "-m", "comment", "--comment", Comment(r.Label), "-j", target)
			out = append(out, rule)
		}
	}
	return out
}

// maxMultiport is how many ports one multiport match takes (a range
// counts as two).
const maxMultiport = 15

// portMatches matches the ranges in as few multiport matches as
// iptables accepts, in order: one line each.
func portMatches(ports [][2]uint16) [][]string {
	var out [][]string
	var ps []string
	n := 0
	flush := func() {
		if len(ps) > 0 {
			out = append(out, []string{"-m", "multiport", "--dports", strings.Join(ps, ",")})
		}
		ps, n = nil, 0
	}
	for _, pr := range ports {
		w, s := 1, fmt.Sprint(pr[0])
		if pr[0] != pr[1] {
			w, s = 2, fmt.Sprintf("%d:%d", pr[0], pr[1])
		}
		if n+w > maxMultiport {
			flush()
		}
		ps, n = append(ps, s), n+w
	}
	flush()
	return out
}

// Comment fits a label into iptables' 256-byte comment.
func Comment(s string) string {
	if len(s) > 250 {
		return s[:250]
	}
	return s
}

// RestoreScript is the iptables-restore --noflush input that replaces
// every chain of c (creating those that do not exist) in one transaction,
// so no packet ever meets a half-written chain.
func RestoreScript(c Chains) string {
	return script(c, ":", " - [0:0]")
}

// CreateScript is the iptables-restore --noflush input that creates every
// chain of c with its rules, then runs more (lines such as "-I OUTPUT 1
// -o wg0 -j LATTICE-wg0"), in one transaction. It fails, changing
// nothing, if any of the chains exists: so the hooks in more cannot be
// there already either (a rule cannot jump to a chain that does not
// exist), and none is ever doubled.
func CreateScript(c Chains, more ...string) string {
	s := script(c, "-N ", "")
	s = strings.TrimSuffix(s, "COMMIT\n")
	for _, l := range more {
		s += l + "\n"
	}
	return s + "COMMIT\n"
}

// script writes c's chains, each declared as decl+name+declEnd, then
// their rules, as one transaction.
func script(c Chains, decl, declEnd string) string {
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, name := range c.Names {
		b.WriteString(decl + name + declEnd + "\n")
	}
	for _, name := range c.Names {
		for _, r := range c.Rules[name] {
			b.WriteString("-A " + name)
			for _, arg := range r {
				b.WriteString(" " + Quote(arg))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// Quote quotes an argument for iptables-restore's line parser.
func Quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\"'\\#") {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
