package policy

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// defaultDeniedCases is every address the defaults must refuse, with the
// reason: what issue 15 found allowed with no policy and with allow: any.
var defaultDeniedCases = []struct{ addr, reason string }{
	{"127.0.0.1", "loopback"},
	{"127.1.2.3", "loopback"},
	{"::1", "loopback"},
	{"::ffff:127.0.0.1", "loopback"},
	{"0.0.0.0", "unspecified"},
	{"0.1.2.3", "unspecified"},
	{"::", "unspecified"},
	{"169.254.0.1", "link-local"},
	{"fe80::1", "link-local"},
	{"fe80::1%eth0", "link-local"},
	{"febf:ffff::1", "link-local"},
	{"169.254.169.254", "metadata"},
	{"169.254.170.2", "metadata"},
	{"169.254.170.23", "metadata"},
	{"168.63.129.16", "metadata"},
	{"100.100.100.200", "metadata"},
	{"192.0.0.192", "metadata"},
	{"fd00:ec2::254", "metadata"},
	{"fd00:ec2::23", "metadata"},
	{"fd20:ce::254", "metadata"},
	{"64:ff9b::a9fe:a9fe", "metadata via nat64"},
	{"64:ff9b::a83f:8110", "metadata via nat64"}, // 168.63.129.16
	{"64:ff9b::7f00:1", "loopback via nat64"},
	{"64:ff9b::a9fe:1", "link-local via nat64"},
	{"64:ff9b::", "unspecified via nat64"},
	{"2002:a9fe:a9fe::1", "metadata via 6to4"},
	{"2002:7f00:1::", "loopback via 6to4"},
}

// TestDefaultDenied: with no policy, with allow: any, with default: allow,
// and with allow 0.0.0.0/0 and ::/0, every default-denied address is
// refused, with its reason.
func TestDefaultDenied(t *testing.T) {
	policies := map[string]*Policy{
		"no policy":     AllowAll(),
		"allow any":     mustParse(t, "rules:\n  - allow: any\n"),
		"default allow": mustParse(t, "default: allow\n"),
		"allow /0":      mustParse(t, "rules:\n  - allow: [0.0.0.0/0, ::/0]\n"),
		"allow peers":   mustParse(t, "default: allow\nrules:\n  - allow: peer:*\n"),
	}
	for name, p := range policies {
		for _, tc := range defaultDeniedCases {
			for _, d := range []Dest{tcp(tc.addr, 80), udp(tc.addr, 53), icmp(tc.addr)} {
				assert.Equal(t, deny(tc.reason), p.Decide(d), "%s: %s %v", name, tc.addr, d.Proto)
			}
		}
	}
	// Near misses stay ordinary destinations.
	for _, a := range []string{"1.0.0.1", "128.0.0.1", "169.253.255.255", "169.255.0.1", "fec0::1", "64:ff9b::101:101", "2002:101:101::", "fd00:ec2::1", "100.100.100.201"} {
		assert.Equal(t, allow("default allow"), AllowAll().Decide(tcp(a, 80)), a)
	}
}

// TestDefaultDeniedNamed: a rule opens a default-denied range only if it
// lies within it; the first such rule decides, in file order; metadata
// needs allow_metadata.
func TestDefaultDeniedNamed(t *testing.T) {
	tests := []struct {
		name, policy string
		dest         Dest
		want         Decision
	}{
		{"loopback named", "rules:\n  - allow: 127.0.0.1\n    ports: [8080]\n", tcp("127.0.0.1", 8080), allow("p.yaml:2 allow 127.0.0.1 ports 8080")},
		{"loopback named other port", "rules:\n  - allow: 127.0.0.1\n    ports: [8080]\n  - allow: any\n", tcp("127.0.0.1", 22), deny("loopback")},
		{"loopback range named", "rules:\n  - allow: 127.0.0.0/8\n", tcp("127.9.9.9", 1), allow("p.yaml:2 allow 127.0.0.0/8")},
		{"wider prefix does not name", "rules:\n  - allow: 0.0.0.0/1\n", tcp("127.0.0.1", 1), deny("loopback")},
		{"first naming rule decides", "rules:\n  - deny: 127.0.0.1\n  - allow: 127.0.0.0/8\n", tcp("127.0.0.1", 1), deny("p.yaml:2 deny 127.0.0.1")},
		{"earlier wider rule skipped", "rules:\n  - allow: any\n  - deny: 10.0.0.0/8\n  - allow: ::1\n", tcp("::1", 1), allow("p.yaml:4 allow ::1")},
		{"link-local does not name metadata", "rules:\n  - allow: 169.254.0.0/16\n", tcp("169.254.169.254", 80), deny("metadata")},
		{"link-local named", "rules:\n  - allow: 169.254.0.0/16\n", tcp("169.254.1.1", 80), allow("p.yaml:2 allow 169.254.0.0/16")},
		{"nat64 named", "rules:\n  - allow: 64:ff9b::7f00:1\n", tcp("64:ff9b::7f00:1", 80), allow("p.yaml:2 allow 64:ff9b::7f00:1")},
		{"v4 does not name nat64", "rules:\n  - allow: 127.0.0.1\n", tcp("64:ff9b::7f00:1", 80), deny("loopback via nat64")},
		{"metadata rule without allow_metadata", "rules:\n  - allow: 168.63.129.16\n", tcp("168.63.129.16", 80), deny("metadata")},
		{"metadata with allow_metadata", "allow_metadata: true\ndefault: allow\n", tcp("168.63.129.16", 80), allow("default allow")},
		{"host address denied", "default: allow\n", Dest{Addr: netip.MustParseAddr("192.168.1.5"), Port: 22, Proto: TCP, Host: true}, deny("host address")},
		{"host address named", "rules:\n  - allow: 192.168.1.5\n", Dest{Addr: netip.MustParseAddr("192.168.1.5"), Port: 22, Proto: TCP, Host: true}, allow("p.yaml:2 allow 192.168.1.5")},
		{"host address not named by its subnet", "rules:\n  - allow: 192.168.1.0/24\n", Dest{Addr: netip.MustParseAddr("192.168.1.5"), Port: 22, Proto: TCP, Host: true}, deny("host address")},
		{"host loopback reason", "default: allow\n", Dest{Addr: netip.MustParseAddr("127.0.0.1"), Port: 22, Proto: TCP, Host: true}, deny("loopback")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, mustParse(t, tt.policy).Decide(tt.dest))
		})
	}
}

func TestDefaultDeniedList(t *testing.T) {
	list := DefaultDenied()
	for i := 1; i < len(list); i++ {
		require.GreaterOrEqual(t, list[i-1].Prefix.Bits(), list[i].Prefix.Bits(), "most specific first")
	}
	has := func(p string) bool {
		for _, d := range list {
			if d.Prefix == netip.MustParsePrefix(p) {
				return true
			}
		}
		return false
	}
	for _, p := range []string{"127.0.0.0/8", "::1/128", "fe80::/10", "64:ff9b::7f00:0/104", "64:ff9b::a9fe:a9fe/128", "2002:a9fe::/32"} {
		assert.True(t, has(p), p)
	}
	list[0].Reason = "changed"
	assert.NotEqual(t, "changed", DefaultDenied()[0].Reason, "a copy")
	for _, a := range MetadataAddrs() {
		i, ok := defaultDenied(a)
		require.True(t, ok, a)
		assert.True(t, defaults[i].Metadata, a)
	}
}

// TestDefaultDeniedBitmap: the leading-bits shortcut answers exactly as a
// scan of the list does, at every range's edges and for random addresses.
func TestDefaultDeniedBitmap(t *testing.T) {
	scan := func(a netip.Addr) (int, bool) {
		for i := range defaults {
			if defaults[i].Prefix.Contains(a) {
				return i, true
			}
		}
		return 0, false
	}
	var addrs []netip.Addr
	for _, d := range defaults {
		first := d.Prefix.Masked().Addr()
		last := first
		for i := 0; i < first.BitLen()-d.Prefix.Bits(); i++ {
			b := last.AsSlice()
			bit := first.BitLen() - 1 - i
			b[bit/8] |= 1 << (7 - bit%8)
			last, _ = netip.AddrFromSlice(b)
		}
		addrs = append(addrs, first, last, first.Prev(), last.Next())
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b4 [4]byte
		var b16 [16]byte
		binary.BigEndian.PutUint32(b4[:], rng.Uint32())
		binary.BigEndian.PutUint64(b16[:8], rng.Uint64())
		binary.BigEndian.PutUint64(b16[8:], rng.Uint64())
		addrs = append(addrs, netip.AddrFrom4(b4), netip.AddrFrom16(b16))
	}
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		wi, wok := scan(a)
		gi, gok := defaultDenied(a)
		require.Equal(t, wok, gok, a)
		require.Equal(t, wi, gi, a)
	}
}
