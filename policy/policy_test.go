package policy

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse("p.yaml", []byte(src))
	require.NoError(t, err)
	return p
}

// mainPolicy exercises every kind of rule; line numbers matter.
const mainPolicy = `default: deny
rules:
  - allow: 93.184.216.0/24
    ports: [80, 443, "8000-8100"]
    proto: tcp
  - allow: peer:web-1
    ports: [8080]
  - deny: 10.0.0.0/8
  - allow: 10.1.0.0/16
  - allow: 100.64.5.0/24
  - deny: 100.64.6.7
  - allow: 100.0.0.0/8
  - allow: [1.1.1.1, 2606:4700:4700::1111]
    ports: 53
    proto: udp
  - allow: 192.0.2.0/24
    proto: icmp
  - allow: 198.51.100.0/24
    ports: ["22"]
  - allow: any
    ports: 443
`

func tcp(addr string, port uint16) Dest {
	return Dest{Addr: netip.MustParseAddr(addr), Port: port, Proto: TCP}
}

func udp(addr string, port uint16) Dest {
	return Dest{Addr: netip.MustParseAddr(addr), Port: port, Proto: UDP}
}

func icmp(addr string) Dest {
	return Dest{Addr: netip.MustParseAddr(addr), Proto: ICMP}
}

func peer(d Dest, name string) Dest {
	d.Overlay, d.Peer = true, name
	return d
}

func allow(rule string) Decision { return Decision{Allow: true, Rule: rule} }
func deny(rule string) Decision  { return Decision{Allow: false, Rule: rule} }

func TestDecideMain(t *testing.T) {
	p := mustParse(t, mainPolicy)
	tests := []struct {
		name string
		dest Dest
		want Decision
	}{
		{"cidr tcp port", tcp("93.184.216.34", 443), allow("p.yaml:3 allow 93.184.216.0/24 tcp ports 80,443,8000-8100")},
		{"cidr tcp port range low", tcp("93.184.216.34", 8000), allow("p.yaml:3 allow 93.184.216.0/24 tcp ports 80,443,8000-8100")},
		{"cidr tcp port range high", tcp("93.184.216.34", 8100), allow("p.yaml:3 allow 93.184.216.0/24 tcp ports 80,443,8000-8100")},
		{"cidr tcp port outside", tcp("93.184.216.34", 8101), deny("default deny")},
		{"cidr wrong proto falls through", udp("93.184.216.34", 443), allow("p.yaml:20 allow any ports 443")},
		{"peer by name", peer(tcp("100.64.9.9", 8080), "web-1"), allow("p.yaml:6 allow peer:web-1 ports 8080")},
		{"peer name case-insensitive", peer(tcp("100.64.9.9", 8080), "WEB-1"), allow("p.yaml:6 allow peer:web-1 ports 8080")},
		{"peer wrong port", peer(tcp("100.64.9.9", 22), "web-1"), deny("overlay peer not named")},
		{"peer rule needs overlay", Dest{Addr: netip.MustParseAddr("203.0.113.1"), Port: 8080, Proto: TCP, Peer: "web-1"}, deny("default deny")},
		{"overlay cidr within overlay", peer(tcp("100.64.5.3", 22), "web-2"), allow("p.yaml:10 allow 100.64.5.0/24")},
		{"overlay single address deny", peer(tcp("100.64.6.7", 22), ""), deny("p.yaml:11 deny 100.64.6.7")},
		{"overlay not named by wider cidr", peer(tcp("100.64.9.9", 22), ""), deny("overlay peer not named")},
		{"overlay not named by any", peer(tcp("100.64.9.9", 443), "db"), deny("overlay peer not named")},
		{"overlay not named by unknown peer", peer(tcp("100.64.9.9", 8080), ""), deny("overlay peer not named")},
		{"non-overlay cgnat address", tcp("100.64.9.9", 80), allow("p.yaml:12 allow 100.0.0.0/8")},
		{"first match wins", tcp("10.1.2.3", 80), deny("p.yaml:8 deny 10.0.0.0/8")},
		{"list target v4", udp("1.1.1.1", 53), allow("p.yaml:13 allow 1.1.1.1 udp ports 53")},
		{"list target v6", udp("2606:4700:4700::1111", 53), allow("p.yaml:13 allow 2606:4700:4700::1111 udp ports 53")},
		{"list target wrong proto", tcp("1.1.1.1", 53), deny("default deny")},
		{"v4-mapped matches v4 rule", udp("::ffff:1.1.1.1", 53), allow("p.yaml:13 allow 1.1.1.1 udp ports 53")},
		{"icmp rule", icmp("192.0.2.1"), allow("p.yaml:16 allow 192.0.2.0/24 icmp")},
		{"icmp rule not tcp", tcp("192.0.2.1", 80), deny("default deny")},
		{"ports rule never matches icmp", icmp("198.51.100.1"), deny("default deny")},
		{"ports rule proto any udp", udp("198.51.100.1", 22), allow("p.yaml:18 allow 198.51.100.0/24 ports 22")},
		{"ports rule proto any tcp", tcp("198.51.100.1", 22), allow("p.yaml:18 allow 198.51.100.0/24 ports 22")},
		{"any v6", tcp("2001:db8::1", 443), allow("p.yaml:20 allow any ports 443")},
		{"default deny", tcp("203.0.113.1", 80), deny("default deny")},
		{"metadata v4", tcp("169.254.169.254", 80), deny("metadata")},
		{"metadata ecs", tcp("169.254.170.2", 80), deny("metadata")},
		{"metadata v6", tcp("fd00:ec2::254", 80), deny("metadata")},
		{"metadata v4-mapped", tcp("::ffff:169.254.169.254", 80), deny("metadata")},
		{"metadata alibaba on overlay", peer(tcp("100.100.100.200", 80), "x"), deny("metadata")},
		{"metadata before any rule", tcp("169.254.169.254", 443), deny("metadata")},
		{"invalid addr", Dest{Proto: TCP, Port: 80}, deny("invalid destination")},
		{"invalid proto any", Dest{Addr: netip.MustParseAddr("1.1.1.1"), Proto: ProtoAny}, deny("invalid destination")},
		{"invalid proto", Dest{Addr: netip.MustParseAddr("1.1.1.1"), Proto: 9}, deny("invalid destination")},
		{"zone ignored", Dest{Addr: netip.MustParseAddr("2001:db8::1%eth0"), Port: 443, Proto: TCP}, allow("p.yaml:20 allow any ports 443")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, p.Decide(tt.dest))
		})
	}
}

func TestDecidePolicies(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		dest   Dest
		want   Decision
	}{
		{"empty denies", "", tcp("1.1.1.1", 443), deny("default deny")},
		{"empty denies overlay", "", peer(tcp("100.64.0.1", 443), "a"), deny("overlay peer not named")},
		{"comments only", "# nothing\n", tcp("1.1.1.1", 443), deny("default deny")},
		{"default omitted", "rules: []\n", tcp("1.1.1.1", 443), deny("default deny")},
		{"rules null", "rules:\n", tcp("1.1.1.1", 443), deny("default deny")},
		{"default allow", "default: allow\n", tcp("1.1.1.1", 443), allow("default allow")},
		{"default allow not for overlay", "default: allow\n", peer(tcp("100.64.0.1", 443), "a"), deny("overlay peer not named")},
		{"default allow not for metadata", "default: allow\n", tcp("169.254.169.254", 80), deny("metadata")},
		{"allow_metadata then default", "allow_metadata: true\n", tcp("169.254.169.254", 80), deny("default deny")},
		{"allow_metadata then default allow", "allow_metadata: true\ndefault: allow\n", tcp("169.254.169.254", 80), allow("default allow")},
		{"allow_metadata then rule", "allow_metadata: true\nrules:\n  - allow: 169.254.169.254\n", tcp("169.254.169.254", 80), allow("p.yaml:3 allow 169.254.169.254")},
		{"allow_metadata false explicit", "allow_metadata: false\nrules:\n  - allow: 169.254.169.254\n", tcp("169.254.169.254", 80), deny("metadata")},
		{"star", "rules:\n  - allow: \"*\"\n", tcp("1.1.1.1", 1), allow("p.yaml:2 allow any")},
		{"star not overlay", "rules:\n  - allow: '*'\n", peer(tcp("100.64.0.1", 1), "a"), deny("overlay peer not named")},
		{"zero prefix not overlay", "rules:\n  - allow: 0.0.0.0/0\n", peer(tcp("100.64.0.1", 1), "a"), deny("overlay peer not named")},
		{"zero prefix v4 only", "rules:\n  - allow: 0.0.0.0/0\n", tcp("2001:db8::1", 1), deny("default deny")},
		{"zero prefix v6", "rules:\n  - allow: ::/0\n", tcp("2001:db8::1", 1), allow("p.yaml:2 allow ::/0")},
		{"overlay prefix names peers", "rules:\n  - allow: 100.64.0.0/10\n", peer(tcp("100.127.0.1", 1), ""), allow("p.yaml:2 allow 100.64.0.0/10")},
		{"all peers", "rules:\n  - allow: peer:*\n    proto: tcp\n", peer(tcp("100.64.0.1", 22), ""), allow("p.yaml:2 allow peer:* tcp")},
		{"all peers not udp", "rules:\n  - allow: peer:*\n    proto: tcp\n", peer(udp("100.64.0.1", 22), ""), deny("overlay peer not named")},
		{"all peers not internet", "rules:\n  - allow: peer:*\n", tcp("1.1.1.1", 22), deny("default deny")},
		{"deny peer then allow all peers", "rules:\n  - deny: peer:db\n  - allow: peer:*\n", peer(tcp("100.64.0.9", 5432), "db"), deny("p.yaml:2 deny peer:db")},
		{"deny not naming overlay is skipped", "rules:\n  - deny: any\n  - allow: peer:db\n", peer(tcp("100.64.0.9", 5432), "db"), allow("p.yaml:3 allow peer:db")},
		{"udp rule", "rules:\n  - allow: 8.8.8.8\n    proto: udp\n", udp("8.8.8.8", 53), allow("p.yaml:2 allow 8.8.8.8 udp")},
		{"deny rule in default allow", "default: allow\nrules:\n  - deny: 203.0.113.0/24\n    ports: 25\n", tcp("203.0.113.5", 25), deny("p.yaml:3 deny 203.0.113.0/24 ports 25")},
		{"deny rule in default allow other port", "default: allow\nrules:\n  - deny: 203.0.113.0/24\n    ports: 25\n", tcp("203.0.113.5", 26), allow("default allow")},
		{"port 65535", "rules:\n  - allow: any\n    ports: 1-65535\n", tcp("1.1.1.1", 65535), allow("p.yaml:2 allow any ports 1-65535")},
		{"port 0 outside every range", "rules:\n  - allow: any\n    ports: 1-65535\n", tcp("1.1.1.1", 0), deny("default deny")},
		{"path label is base name", "rules:\n  - allow: any\n", tcp("1.1.1.1", 1), allow("p.yaml:2 allow any")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, tt.policy)
			assert.Equal(t, tt.want, p.Decide(tt.dest))
		})
	}
}

func TestAllowAll(t *testing.T) {
	p := AllowAll()
	assert.Equal(t, allow("default allow"), p.Decide(tcp("1.1.1.1", 443)))
	assert.Equal(t, allow("default allow"), p.Decide(peer(udp("100.64.0.1", 53), "any-peer")))
	assert.Equal(t, allow("default allow"), p.Decide(peer(tcp("100.64.0.1", 53), "")))
	assert.Equal(t, allow("default allow"), p.Decide(icmp("2001:db8::1")))
	assert.Equal(t, deny("metadata"), p.Decide(tcp("169.254.169.254", 80)))
	assert.Equal(t, deny("invalid destination"), p.Decide(Dest{}))
	assert.Equal(t, "none (allow all but loopback, link-local, metadata and host addresses)", p.Source())
	assert.Empty(t, p.Digest())
	assert.Equal(t, "none (allow all but loopback, link-local, metadata and host addresses) (default allow, metadata denied)", p.String())
}

func TestNilPolicy(t *testing.T) {
	var p *Policy
	assert.Equal(t, deny("no policy"), p.Decide(tcp("1.1.1.1", 443)))
	assert.Equal(t, "<no policy>", p.String())
	assert.Nil(t, p.WithOverlay(DefaultOverlay))
}

func TestWithOverlay(t *testing.T) {
	p := mustParse(t, "rules:\n  - allow: 10.1.0.0/16\n  - allow: 100.64.5.0/24\n  - allow: 10.0.0.0/8\n")
	q := p.WithOverlay(netip.MustParsePrefix("10.0.0.0/12"))
	assert.Equal(t, netip.MustParsePrefix("10.0.0.0/12"), q.Overlay())
	assert.Equal(t, DefaultOverlay, p.Overlay(), "the original is unchanged")

	assert.Equal(t, allow("p.yaml:2 allow 10.1.0.0/16"), q.Decide(peer(tcp("10.1.2.3", 1), "")))
	assert.Equal(t, deny("overlay peer not named"), p.Decide(peer(tcp("10.1.2.3", 1), "")))
	assert.Equal(t, deny("overlay peer not named"), q.Decide(peer(tcp("100.64.5.1", 1), "")))
	assert.Equal(t, allow("p.yaml:3 allow 100.64.5.0/24"), p.Decide(peer(tcp("100.64.5.1", 1), "")))
	// 10.0.0.0/8 is wider than the overlay: it does not name its peers.
	assert.Equal(t, deny("overlay peer not named"), q.Decide(peer(tcp("10.2.0.1", 1), "")))
	// Not on the overlay, the usual rules apply.
	assert.Equal(t, allow("p.yaml:4 allow 10.0.0.0/8"), q.Decide(tcp("10.2.0.1", 1)))

	r := p.WithOverlay(netip.Prefix{})
	assert.Equal(t, DefaultOverlay, r.Overlay())
	assert.Equal(t, netip.MustParsePrefix("10.0.0.0/8"), p.WithOverlay(netip.MustParsePrefix("10.1.2.3/8")).Overlay())
}

func TestIsMetadata(t *testing.T) {
	for _, a := range []string{"169.254.169.254", "169.254.170.2", "169.254.170.23", "fd00:ec2::254", "fd00:ec2::23", "100.100.100.200",
		"168.63.129.16", "192.0.0.192", "fd20:ce::254", "::ffff:169.254.169.254", "fd00:ec2::254%eth0"} {
		assert.True(t, IsMetadata(netip.MustParseAddr(a)), a)
	}
	for _, a := range []string{"169.254.169.253", "100.100.100.100", "fd00:ec2::1", "1.1.1.1"} {
		assert.False(t, IsMetadata(netip.MustParseAddr(a)), a)
	}
	assert.False(t, IsMetadata(netip.Addr{}))
}

func TestProtoString(t *testing.T) {
	assert.Equal(t, "any", ProtoAny.String())
	assert.Equal(t, "tcp", TCP.String())
	assert.Equal(t, "udp", UDP.String())
	assert.Equal(t, "icmp", ICMP.String())
	assert.Equal(t, "Proto(7)", Proto(7).String())
}

func TestPolicyString(t *testing.T) {
	p := mustParse(t, "default: allow\nallow_metadata: true\nrules:\n  - deny: 10.0.0.0/8\n")
	assert.Equal(t, "p.yaml", p.Source())
	assert.Len(t, p.Digest(), 64)
	assert.Equal(t, "p.yaml (sha256 "+p.Digest()[:12]+", 1 rules, default allow, metadata allowed)", p.String())
}

func TestDecideNoAllocs(t *testing.T) {
	p := mustParse(t, mainPolicy)
	dests := []Dest{
		tcp("203.0.113.1", 80), peer(tcp("100.64.9.9", 8080), "web-1"),
		udp("::ffff:1.1.1.1", 53), tcp("169.254.169.254", 80), peer(tcp("100.64.9.9", 1), ""),
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, d := range dests {
			_ = p.Decide(d)
		}
	})
	assert.Zero(t, allocs)
}

func BenchmarkDecide(b *testing.B) {
	p := mustParse(b, mainPolicy)
	benches := []struct {
		name string
		dest Dest
	}{
		{"first rule", tcp("93.184.216.34", 443)},
		{"default", tcp("203.0.113.1", 80)},
		{"peer", peer(tcp("100.64.9.9", 8080), "web-1")},
		{"overlay unnamed", peer(tcp("100.64.9.9", 22), "")},
		{"metadata", tcp("169.254.169.254", 80)},
	}
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = p.Decide(bb.dest)
			}
		})
	}
}

func TestRules(t *testing.T) {
	p := mustParse(t, "default: deny\nrules:\n  - allow: peer:web\n    ports: [80, \"8000-8100\"]\n    proto: tcp\n  - deny: [100.64.0.0/16, any]\n")
	rs := p.Rules()
	require.Len(t, rs, 3)
	assert.Equal(t, RuleView{Allow: true, Target: TargetPeer, Peer: "web", Proto: TCP, Ports: [][2]uint16{{80, 80}, {8000, 8100}},
		Label: rs[0].Label}, rs[0])
	assert.Contains(t, rs[0].Label, ":3 allow peer:web tcp ports 80,8000-8100")
	assert.Equal(t, TargetPrefix, rs[1].Target)
	assert.True(t, rs[1].NamesOverlay)
	assert.Equal(t, TargetAny, rs[2].Target)
	assert.False(t, p.AllowsMetadata())
	assert.False(t, p.DefaultAllows())
	assert.Contains(t, MetadataAddrs(), netip.MustParseAddr("169.254.169.254"))
}
