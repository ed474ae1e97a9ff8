package sandbox

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/policy"
)

// defaultDeniedAddrs is every address gvisor mode's defaults must refuse:
// what issue 15 found open with no policy and with allow: any.
var defaultDeniedAddrs = []string{
	"127.0.0.1", "127.1.2.3", "0.0.0.0", "169.254.0.1", "169.254.169.254", "169.254.170.2", "169.254.170.23",
	"168.63.129.16", "100.100.100.200", "192.0.0.192",
	"::1", "::", "fe80::1", "fd00:ec2::254", "fd00:ec2::23", "fd20:ce::254",
	"64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b::a83f:8110", "2002:a9fe:a9fe::1",
}

// chainVerdict runs a new TCP connection to dst:port through rules as
// iptables would (conntrack state NEW; local is what addrtype LOCAL
// matches) and returns the verdict of the first rule that matches.
func chainVerdict(t *testing.T, rules [][]string, dst netip.Addr, port string, local []netip.Addr) string {
	t.Helper()
	for _, r := range rules {
		match := true
		verdict := ""
		for i := 0; i < len(r); i++ {
			switch r[i] {
			case "-d":
				p := netip.MustParsePrefix(r[i+1])
				match = match && p.Contains(dst)
				i++
			case "--ctstate":
				match = false // a new connection is never ESTABLISHED
				i++
			case "--dst-type":
				require.Equal(t, "LOCAL", r[i+1])
				match = match && slices.Contains(local, dst)
				i++
			case "-p":
				match = match && r[i+1] == "tcp"
				i++
			case "--dports":
				match = match && slices.Contains(strings.Split(r[i+1], ","), port)
				i++
			case "-j":
				verdict = r[i+1]
				i++
			case "--comment", "-m":
				i++
			default:
				t.Fatalf("rule %q: unknown argument %q", r, r[i])
			}
		}
		if match {
			return verdict
		}
	}
	return "fall through"
}

func mustPolicy(t *testing.T, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte(src))
	require.NoError(t, err)
	return p
}

// TestDefaultRulesRefuse: gvisor mode's LATTICE-DEFAULTS, in both
// families, rejects every default-denied address and the host's own ones
// whatever the policy's default and any rules say, and lets through only
// what a rule names, in the order Decide would.
func TestDefaultRulesRefuse(t *testing.T) {
	self := netip.MustParseAddr("100.64.0.7")
	hostAddr := netip.MustParseAddr("10.202.1.2")
	local := []netip.Addr{self, hostAddr, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}
	rules := func(p *policy.Policy, a netip.Addr) [][]string { return defaultRules(p, self, a.Is6()) }
	for name, pol := range map[string]*policy.Policy{
		"no policy":     policy.AllowAll(),
		"allow any":     mustPolicy(t, "rules:\n  - allow: any\n"),
		"default allow": mustPolicy(t, "default: allow\nrules:\n  - allow: [0.0.0.0/0, ::/0]\n"),
	} {
		for _, s := range append(defaultDeniedAddrs, hostAddr.String()) {
			a := netip.MustParseAddr(s)
			assert.Equal(t, "REJECT", chainVerdict(t, rules(pol, a), a, "80", local), "%s: %s", name, s)
		}
		for _, s := range []string{"1.1.1.1", "10.202.1.1", "2001:db8::1", self.String()} {
			a := netip.MustParseAddr(s)
			assert.NotEqual(t, "REJECT", chainVerdict(t, rules(pol, a), a, "80", local), "%s: %s passes on to the rest of OUTPUT", name, s)
		}
	}

	named := mustPolicy(t, `rules:
  - deny: 127.0.0.2
  - allow: 127.0.0.0/8
    ports: [8080]
    proto: tcp
  - allow: 169.254.0.0/16
  - allow: 10.202.1.2
  - allow: ::1
`)
	for _, tc := range []struct {
		addr, port, want string
	}{
		{"127.0.0.1", "8080", "RETURN"},
		{"127.0.0.1", "22", "REJECT"},
		{"127.0.0.2", "8080", "REJECT"},
		{"169.254.1.1", "80", "RETURN"},
		{"169.254.169.254", "80", "REJECT"}, // link-local does not name metadata
		{"10.202.1.2", "22", "RETURN"},
		{"::1", "22", "RETURN"},
		{"64:ff9b::7f00:1", "8080", "REJECT"},
	} {
		a := netip.MustParseAddr(tc.addr)
		assert.Equal(t, tc.want, chainVerdict(t, rules(named, a), a, tc.port, local), "%s:%s", tc.addr, tc.port)
	}

	meta := mustPolicy(t, "allow_metadata: true\n")
	for _, s := range []string{"169.254.169.254", "fd00:ec2::254", "168.63.129.16"} {
		a := netip.MustParseAddr(s)
		assert.Equal(t, "RETURN", chainVerdict(t, rules(meta, a), a, "80", local), "allow_metadata: %s", s)
	}
	a := netip.MustParseAddr("169.254.1.1")
	assert.Equal(t, "REJECT", chainVerdict(t, rules(meta, a), a, "80", local), "allow_metadata opens only metadata")
}

// TestDefaultRulesMatchDecide: for every default-denied address the chain
// and Decide agree, for a set of policies.
func TestDefaultRulesMatchDecide(t *testing.T) {
	for _, src := range []string{
		"", "default: allow\n", "rules:\n  - allow: 127.0.0.1\n", "rules:\n  - deny: 127.0.0.1\n  - allow: 127.0.0.0/8\n",
		"rules:\n  - allow: fe80::/10\n  - allow: 64:ff9b::a9fe:a9fe\n", "allow_metadata: true\nrules:\n  - allow: 169.254.0.0/16\n",
	} {
		pol := mustPolicy(t, src)
		for _, s := range defaultDeniedAddrs {
			a := netip.MustParseAddr(s)
			dec := pol.Decide(policy.Dest{Addr: a, Port: 80, Proto: policy.TCP})
			got := chainVerdict(t, defaultRules(pol, netip.Addr{}, a.Is6()), a, "80", nil)
			if dec.Allow {
				assert.Equal(t, "RETURN", got, "%q: %s allowed by %s", src, s, dec.Rule)
			} else if dec.Rule != "default deny" {
				assert.Equal(t, "REJECT", got, "%q: %s denied by %s", src, s, dec.Rule)
			}
		}
	}
}
