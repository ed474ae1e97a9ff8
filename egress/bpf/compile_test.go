package bpf

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/policy"
	"github.com/latticelab/lattice/policy/policytest"
)

const samplePolicy = policytest.Sample

// TestCompileMatchesDecide checks the kernel table's decision against
// Policy.Decide for addresses around every key, all protocols and a spread
// of ports: one decision function.
func TestCompileMatchesDecide(t *testing.T) {
	peers := map[string][]netip.Addr{"web-1": {netip.MustParseAddr("100.64.0.5")}}
	hosts := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("127.0.0.1")}
	for _, tc := range []struct {
		name string
		src  string
	}{
		{"sample", samplePolicy},
		{"default allow", "default: allow\nrules:\n  - deny: 1.2.3.0/24\n  - allow: peer:*\n    proto: tcp\n"},
		{"metadata allowed", "allow_metadata: true\nrules:\n  - allow: 169.254.169.254\n    ports: [80]\n  - allow: 100.100.100.200\n"},
		{"host opened", "default: allow\nrules:\n  - allow: 192.0.2.10\n    ports: [22]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Parse("p.yaml", []byte(tc.src))
			require.NoError(t, err)
			tab, err := compile(p, compileInput{peers: peers, hosts: hosts})
			require.NoError(t, err)
			checkAgainstDecide(t, p, tab, peers, hosts)
		})
	}
	t.Run("allow all", func(t *testing.T) {
		tab, err := compile(policy.AllowAll(), compileInput{peers: peers, hosts: hosts})
		require.NoError(t, err)
		checkAgainstDecide(t, policy.AllowAll(), tab, peers, hosts)
	})
	t.Run("nil policy", func(t *testing.T) {
		tab, err := compile(nil, compileInput{})
		require.NoError(t, err)
		allow, why := tab.lookup(netip.MustParseAddr("8.8.8.8"), policy.TCP, 443)
		assert.False(t, allow)
		assert.Equal(t, "no policy", why)
	})
}

func checkAgainstDecide(t *testing.T, p *policy.Policy, tab *table, peers map[string][]netip.Addr, hosts []netip.Addr) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var addrs []netip.Addr
	for _, e := range tab.entries {
		a := e.prefix.Addr()
		addrs = append(addrs, a, a.Prev(), lastAddr(e.prefix), lastAddr(e.prefix).Next())
		for range 4 {
			addrs = append(addrs, randomIn(rng, e.prefix))
		}
	}
	ports := []uint16{0, 1, 22, 53, 80, 443, 1024, 1025, 8000, 8080, 8100, 8101, 9000, 65535}
	checked := 0
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		for _, proto := range []policy.Proto{policy.TCP, policy.UDP, policy.ICMP} {
			for _, port := range ports {
				d := dest(p, a, proto, port, peers, hosts)
				want := p.Decide(d)
				allow, why := tab.lookup(a, proto, port)
				if allow != want.Allow || why != want.Rule {
					t.Fatalf("%s %s port %d: kernel table says %v %q, Decide says %v %q", a, proto, port, allow, why, want.Allow, want.Rule)
				}
				checked++
			}
		}
	}
	require.Greater(t, checked, 1000)
}

// dest is what the kernel knows about a packet, as a policy.Dest.
func dest(p *policy.Policy, a netip.Addr, proto policy.Proto, port uint16, peers map[string][]netip.Addr, hosts []netip.Addr) policy.Dest {
	d := policy.Dest{Addr: a, Proto: proto, Port: port, Overlay: p.Overlay().Contains(a.Unmap())}
	for name, as := range peers {
		for _, pa := range as {
			if pa == a.Unmap() {
				d.Peer = name
			}
		}
	}
	for _, h := range hosts {
		if h == a.Unmap() {
			d.Host = true
		}
	}
	return d
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func randomIn(rng *rand.Rand, p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		if rng.IntN(2) == 1 {
			b[i/8] |= 0x80 >> (i % 8)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func TestCompileTooDeep(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range MaxClauses + 1 {
		fmt.Fprintf(&b, "  - allow: 10.0.0.0/8\n    ports: [%d]\n", i+1)
	}
	p, err := policy.Parse("deep.yaml", []byte(b.String()))
	require.NoError(t, err)
	_, err = compile(p, compileInput{})
	assert.EqualError(t, err, "bpf: destination 10.0.0.0/8 is named by 34 rules and defaults; the kernel filter walks at most 32")
}
