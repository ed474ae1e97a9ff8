package iptables

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/policy"
	"github.com/latticelab/lattice/policy/policytest"
)

const samplePolicy = policytest.Sample

// TestRenderMatchesDecide runs the rendered chains in a small evaluator
// of the iptables subset Render writes and compares every verdict, with
// the rule that made it, to Policy.Decide: one decision function.
func TestRenderMatchesDecide(t *testing.T) {
	peers := map[string][]netip.Addr{"web-1": {netip.MustParseAddr("100.64.0.5")}}
	for _, tc := range []struct{ name, src string }{
		{"sample", samplePolicy},
		{"default allow", "default: allow\nrules:\n  - deny: 1.2.3.0/24\n  - allow: peer:*\n    proto: tcp\n"},
		{"metadata allowed", "allow_metadata: true\nrules:\n  - allow: 169.254.169.254\n    ports: [80]\n  - allow: 100.100.100.200\n"},
		{"many ports", "rules:\n  - allow: 8.8.8.8\n    ports: [" + portList(40) + "]\n"},
		{"empty", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Parse("p.yaml", []byte(tc.src))
			require.NoError(t, err)
			check(t, p, peers)
		})
	}
	t.Run("allow all", func(t *testing.T) { check(t, policy.AllowAll(), peers) })
	t.Run("nil policy", func(t *testing.T) {
		for _, v6 := range []bool{false, true} {
			c := Render(nil, Input{Chain: "LATTICE-x", V6: v6})
			allow, why := eval(t, c, "LATTICE-x", netip.MustParseAddr("8.8.8.8"), policy.TCP, 443)
			assert.False(t, allow)
			assert.Equal(t, "no policy", why)
		}
	})
}

func portList(n int) string {
	var ps []string
	for i := range n {
		ps = append(ps, strconv.Itoa(1000+3*i))
	}
	return strings.Join(ps, ", ")
}

func check(t *testing.T, p *policy.Policy, peers map[string][]netip.Addr) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var prefixes []netip.Prefix
	for _, r := range p.Rules() {
		if r.Prefix.IsValid() {
			prefixes = append(prefixes, r.Prefix)
		}
	}
	for _, d := range policy.DefaultDenied() {
		prefixes = append(prefixes, d.Prefix)
	}
	prefixes = append(prefixes, p.Overlay(), netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"), netip.MustParsePrefix("100.64.0.5/32"))
	var addrs []netip.Addr
	for _, pf := range prefixes {
		a := pf.Masked().Addr()
		addrs = append(addrs, a, a.Prev(), last(pf), last(pf).Next())
		for range 4 {
			addrs = append(addrs, random(rng, pf))
		}
	}
	chains := map[bool]Chains{
		false: Render(p, Input{Chain: "LATTICE-x", Peers: peers}),
		true:  Render(p, Input{Chain: "LATTICE-x", Peers: peers, V6: true}),
	}
	logged := map[bool]Chains{
		false: Render(p, Input{Chain: "LATTICE-x", Peers: peers, LogGroup: 7, LogAllowed: true, Gen: 3}),
		true:  Render(p, Input{Chain: "LATTICE-x", Peers: peers, V6: true, LogGroup: 7, LogAllowed: true, Gen: 3}),
	}
	ports := []uint16{1, 22, 53, 80, 443, 1000, 1003, 1117, 1024, 1025, 8000, 8080, 8100, 8101, 9000, 65535}
	checked := 0
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		for _, proto := range []policy.Proto{policy.TCP, policy.UDP, policy.ICMP} {
			for _, port := range ports {
				d := policy.Dest{Addr: a, Proto: proto, Port: port, Overlay: p.Overlay().Contains(a)}
				for name, as := range peers {
					if slices.Contains(as, a) {
						d.Peer = name
					}
				}
				want := p.Decide(d)
				allow, why := eval(t, chains[a.Is6()], "LATTICE-x", a, proto, port)
				if allow != want.Allow || why != want.Rule {
					t.Fatalf("%s %s port %d: chains say %v %q, Decide says %v %q", a, proto, port, allow, why, want.Allow, want.Rule)
				}
				// With logging: the same verdict, and the packet logged once
				// with the verdict and the rule.
				lc := logged[a.Is6()]
				lastLog = ""
				allow, why = eval(t, lc, "LATTICE-x", a, proto, port)
				require.Equal(t, want.Allow, allow)
				require.Equal(t, want.Rule, why)
				gen, id, logAllow, err := parsePrefix(lastLog)
				require.NoError(t, err, "%s %s port %d not logged", a, proto, port)
				require.Equal(t, uint32(3), gen)
				require.Equal(t, want.Allow, logAllow)
				require.Equal(t, Comment(want.Rule), lc.Labels[id])
				checked++
			}
		}
	}
	require.Greater(t, checked, 1000)
}

// eval runs a new packet through the chains from chain: the subset of
// iptables Render writes (-d, -p, multiport --dports, comment, -g, -j
// RETURN/REJECT; conntrack and icmpv6-type never match a new echo
// request or connection).
// lastLog is the NFLOG prefix of the last logging rule eval passed.
var lastLog string

func eval(t *testing.T, c Chains, chain string, dst netip.Addr, proto policy.Proto, port uint16) (bool, string) {
	t.Helper()
	for hops := 0; hops < 8; hops++ {
		rules, ok := c.Rules[chain]
		require.True(t, ok, "chain %s", chain)
		next := ""
	rules:
		for _, r := range rules {
			comment, target, jump := "", "", ""
			for i := 0; i < len(r); i++ {
				arg := func() string { i++; return r[i] }
				switch r[i] {
				case "-d":
					if !netip.MustParsePrefix(arg()).Contains(dst) {
						continue rules
					}
				case "-p":
					if protoName(proto, dst.Is6()) != arg() {
						continue rules
					}
				case "-m":
					switch m := arg(); m {
					case "conntrack":
						if arg() != "--ctstate" || arg() != "NEW" {
							continue rules // established replies
						}
					case "multiport", "comment":
					default:
						t.Fatalf("match %s", m)
					}
				case "--dports":
					if proto == policy.ICMP || !inPorts(t, arg(), port) {
						continue rules
					}
				case "--icmpv6-type":
					continue rules
				case "--comment":
					comment = arg()
				case "-j":
					target = arg()
				case "-g":
					jump = arg()
				case "--nflog-group":
					require.Equal(t, "7", arg())
				case "--nflog-prefix":
					comment = arg()
				default:
					t.Fatalf("argument %q in %v", r[i], r)
				}
			}
			switch {
			case jump != "":
				next = jump
				break rules
			case target == "RETURN":
				return true, comment
			case target == "REJECT":
				return false, comment
			case target == "NFLOG":
				require.Empty(t, lastLog, "logged twice: %v", r)
				lastLog = comment
				continue
			}
			t.Fatalf("rule without a verdict: %v", r)
		}
		if next == "" {
			t.Fatalf("chain %s ends without a verdict", chain)
		}
		chain = next
	}
	t.Fatal("loop")
	return false, ""
}

func protoName(p policy.Proto, v6 bool) string {
	switch {
	case p == policy.TCP:
		return "tcp"
	case p == policy.UDP:
		return "udp"
	case v6:
		return "ipv6-icmp"
	}
	return "icmp"
}

func inPorts(t *testing.T, list string, port uint16) bool {
	n := 0
	for _, s := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(s, ":")
		l, err := strconv.Atoi(lo)
		require.NoError(t, err)
		h := l
		n++
		if isRange {
			h, err = strconv.Atoi(hi)
			require.NoError(t, err)
			n++
		}
		if int(port) >= l && int(port) <= h {
			return true
		}
	}
	require.LessOrEqual(t, n, maxMultiport, "multiport takes at most 15 ports: %s", list)
	return false
}

func last(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func random(rng *rand.Rand, p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		if rng.IntN(2) == 1 {
			b[i/8] |= 0x80 >> (i % 8)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// TestRestoreScript: every chain declared (so --noflush replaces it), then
// its rules, arguments quoted for iptables-restore.
func TestRestoreScript(t *testing.T) {
	p, err := policy.Parse("my policy.yaml", []byte("rules:\n  - allow: 8.8.8.8\n    ports: [53]\n    proto: udp\n"))
	require.NoError(t, err)
	s := RestoreScript(Render(p, Input{Chain: "LATTICE-lt0"}))
	lines := strings.Split(s, "\n")
	assert.Equal(t, []string{"*filter", ":LATTICE-lt0 - [0:0]", ":LATTICE-lt0-D - [0:0]", ":LATTICE-lt0-P - [0:0]", ":LATTICE-lt0-R - [0:0]"}, lines[:5])
	assert.Contains(t, s, `-A LATTICE-lt0-R -d 8.8.8.8/32 -p udp -m multiport --dports 53 -m comment --comment "my policy.yaml:2 allow 8.8.8.8 udp ports 53" -j RETURN`+"\n")
	assert.True(t, strings.HasSuffix(s, "COMMIT\n"))
	assert.Equal(t, `"a \"b\" \\c"`, Quote(`a "b" \c`))
	assert.Equal(t, `""`, Quote(""))
}

// TestFilterCommands: New writes the chains and their hooks in one restore
// per family (after a crash: replaces the chains, inserts only the missing
// hooks); an unchanged Reload runs nothing, a changed one replaces the
// chains; Close unhooks and deletes every chain in one restore, or step by
// step when a part is gone.
func TestFilterCommands(t *testing.T) {
	var log, scripts []string
	existing := map[string]bool{}
	run := func(tool string, args []string, stdin string) error {
		cmd := tool + " " + strings.Join(args, " ")
		log = append(log, cmd)
		if stdin != "" {
			scripts = append(scripts, stdin)
			// A restore's deletions: all there, or the transaction fails;
			// so do its chain creations (-N) unless none exists.
			fam := strings.TrimSuffix(tool, "-restore")
			var dels, ins, chains, gone []string
			for _, l := range strings.Split(stdin, "\n") {
				if rest, ok := strings.CutPrefix(l, "-D "); ok {
					dels = append(dels, fam+rest)
				}
				if rest, ok := strings.CutPrefix(l, "-I "); ok {
					ins = append(ins, fam+strings.Replace(rest, " 1 ", " ", 1))
				}
				if rest, ok := strings.CutPrefix(l, "-N "); ok {
					if existing[fam+"chain "+rest] {
						return fmt.Errorf("chain already exists")
					}
					chains = append(chains, fam+"chain "+rest)
				}
				if rest, ok := strings.CutPrefix(l, ":"); ok {
					chains = append(chains, fam+"chain "+strings.Fields(rest)[0])
				}
				if rest, ok := strings.CutPrefix(l, "-X "); ok {
					gone = append(gone, fam+"chain "+rest)
				}
			}
			for _, d := range dels {
				if !existing[d] {
					return fmt.Errorf("no such rule")
				}
			}
			for _, d := range dels {
				delete(existing, d)
			}
			for _, k := range append(ins, chains...) {
				existing[k] = true
			}
			for _, k := range gone {
				delete(existing, k)
			}
			return nil
		}
		switch {
		case strings.Contains(cmd, " -C "):
			if existing[tool+strings.Split(cmd, " -C ")[1]] {
				return nil
			}
			return fmt.Errorf("no such rule")
		case strings.Contains(cmd, " -X "):
			delete(existing, tool+"chain "+strings.Split(cmd, " -X ")[1])
		case strings.Contains(cmd, " -D "):
			if existing[tool+strings.Split(cmd, " -D ")[1]] {
				delete(existing, tool+strings.Split(cmd, " -D ")[1])
				return nil
			}
			return fmt.Errorf("no such rule")
		case strings.Contains(cmd, " -I "):
			rest := strings.Split(cmd, " -I ")[1]
			existing[tool+strings.Replace(rest, " 1 ", " ", 1)] = true
		}
		return nil
	}
	no := false
	pol, err := policy.Parse("p.yaml", []byte("rules:\n  - allow: any\n"))
	require.NoError(t, err)
	f, err := New(Config{Interface: "lt0", Policy: pol, Run: run, IPv6: &no})
	require.NoError(t, err)
	assert.Equal(t, []string{"iptables-restore --noflush -w 5"}, log, "chains and hooks in one transaction")
	require.Len(t, scripts, 1)
	assert.True(t, strings.HasPrefix(scripts[0], "*filter\n-N LATTICE-lt0\n-N LATTICE-lt0-D\n-N LATTICE-lt0-P\n-N LATTICE-lt0-R\n-A LATTICE-lt0 "), scripts[0])
	assert.True(t, strings.HasSuffix(scripts[0], "\n-I OUTPUT 1 -o lt0 -j LATTICE-lt0\n-I FORWARD 1 -o lt0 -j LATTICE-lt0\nCOMMIT\n"), scripts[0])
	assert.True(t, existing["iptablesOUTPUT -o lt0 -j LATTICE-lt0"] && existing["iptablesFORWARD -o lt0 -j LATTICE-lt0"], "hooked")
	log = nil
	require.NoError(t, f.Reload(pol, nil))
	assert.Empty(t, log, "unchanged")
	pol2, err := policy.Parse("p.yaml", []byte("rules:\n  - allow: 8.8.8.8\n"))
	require.NoError(t, err)
	log, scripts = nil, nil
	require.NoError(t, f.Reload(pol2, nil))
	assert.Equal(t, []string{"iptables-restore --noflush -w 5"}, log, "changed")
	require.Len(t, scripts, 1)
	assert.True(t, strings.HasPrefix(scripts[0], "*filter\n:LATTICE-lt0 - [0:0]\n"), "a reload replaces the chains: %s", scripts[0])
	assert.NotContains(t, scripts[0], "-I ", "and hooks nothing")
	log, scripts = nil, nil
	require.NoError(t, f.Close())
	assert.Equal(t, []string{"iptables-restore --noflush -w 5"}, log, "unhooked and deleted in one transaction")
	require.Len(t, scripts, 1)
	assert.Equal(t, "*filter\n-D OUTPUT -o lt0 -j LATTICE-lt0\n-D FORWARD -o lt0 -j LATTICE-lt0\n"+
		"-F LATTICE-lt0\n-F LATTICE-lt0-D\n-F LATTICE-lt0-P\n-F LATTICE-lt0-R\n"+
		"-X LATTICE-lt0\n-X LATTICE-lt0-D\n-X LATTICE-lt0-P\n-X LATTICE-lt0-R\nCOMMIT\n", scripts[0])
	assert.Empty(t, existing, "every hook and chain removed")
	assert.ErrorIs(t, f.Reload(pol, nil), ErrClosed)
	assert.NoError(t, f.Close())

	// Chains and one hook an earlier run left (a crash): the creating
	// transaction fails, the chains are replaced, and only the missing
	// hook is inserted, so none is doubled.
	for _, k := range []string{"chain LATTICE-lt0", "chain LATTICE-lt0-D", "chain LATTICE-lt0-P", "chain LATTICE-lt0-R", "OUTPUT -o lt0 -j LATTICE-lt0"} {
		existing["iptables"+k] = true
	}
	log, scripts = nil, nil
	f, err = New(Config{Interface: "lt0", Policy: pol, Run: run, IPv6: &no})
	require.NoError(t, err)
	assert.Equal(t, []string{
		"iptables-restore --noflush -w 5",
		"iptables-restore --noflush -w 5",
		"iptables -w 5 -C OUTPUT -o lt0 -j LATTICE-lt0",
		"iptables -w 5 -C FORWARD -o lt0 -j LATTICE-lt0",
		"iptables -w 5 -I FORWARD 1 -o lt0 -j LATTICE-lt0",
	}, log)
	require.Len(t, scripts, 2)
	assert.Contains(t, scripts[0], "\n-N LATTICE-lt0\n")
	assert.Contains(t, scripts[1], "\n:LATTICE-lt0 - [0:0]\n")
	require.NoError(t, f.Close())
	assert.Empty(t, existing, "every hook and chain removed")

	// A hook gone already (removed by hand): the transaction fails, and
	// each step is tried on its own.
	f, err = New(Config{Interface: "lt0", Policy: pol, Run: run, IPv6: &no})
	require.NoError(t, err)
	delete(existing, "iptablesFORWARD -o lt0 -j LATTICE-lt0")
	log = nil
	require.NoError(t, f.Close())
	assert.Equal(t, "iptables-restore --noflush -w 5", log[0])
	assert.Contains(t, log, "iptables -w 5 -D OUTPUT -o lt0 -j LATTICE-lt0")
	assert.Contains(t, log, "iptables -w 5 -D FORWARD -o lt0 -j LATTICE-lt0")
	assert.Contains(t, log, "iptables -w 5 -X LATTICE-lt0-R")
	assert.Empty(t, existing, "every hook removed")

	_, err = New(Config{Interface: "a b", Run: run})
	assert.EqualError(t, err, `iptables: interface "a b": want a Linux interface name`)
}
