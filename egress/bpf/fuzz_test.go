package bpf

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/policy"
)

func sampleEvent(family byte, dst, src netip.Addr) []byte {
	b := make([]byte, eventSize)
	d, s := dst.As16(), src.As16()
	copy(b[evDst:], d[:])
	copy(b[evSrc:], s[:])
	binary.NativeEndian.PutUint16(b[evSport:], 40000)
	binary.NativeEndian.PutUint16(b[evDport:], 443)
	b[evProto], b[evFamily], b[evFlags] = 1, family, 0x02
	binary.NativeEndian.PutUint32(b[evIfindex:], 7)
	binary.NativeEndian.PutUint32(b[evRule:], 3)
	binary.NativeEndian.PutUint32(b[evGen:], 2)
	return b
}

func TestDecodeEvent(t *testing.T) {
	v4 := sampleEvent(4, netip.MustParseAddr("::ffff:10.0.0.2"), netip.MustParseAddr("::ffff:10.0.0.1"))
	r, err := decodeEvent(v4)
	require.NoError(t, err)
	assert.Equal(t, "deny tcp 10.0.0.1:40000 -> 10.0.0.2:443 () if 7", r.String())
	assert.Equal(t, uint32(3), r.rule)
	assert.Equal(t, uint32(2), r.gen)

	for _, tc := range []struct {
		name    string
		b       []byte
		wantErr string
	}{
		{"short", v4[:10], "bpf: event of 10 bytes, want 56"},
		{"family", sampleEvent(9, netip.IPv6Loopback(), netip.IPv6Loopback()), "bpf: event of address family 9, want 4 or 6"},
		{"v4 not mapped", sampleEvent(4, netip.IPv6Loopback(), netip.IPv6Loopback()), "bpf: IPv4 event with IPv6 addresses ::1, ::1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeEvent(tc.b)
			assert.EqualError(t, err, tc.wantErr)
		})
	}
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add(sampleEvent(4, netip.MustParseAddr("::ffff:10.0.0.2"), netip.MustParseAddr("::ffff:10.0.0.1")))
	f.Add(sampleEvent(6, netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("fe80::1")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeEvent(b)
		if err != nil {
			return
		}
		if !r.Dst.IsValid() || !r.Src.IsValid() || r.Dst.Is4() != r.Src.Is4() {
			t.Fatalf("decoded %v from %x", r, b)
		}
	})
}

// FuzzCompile checks the kernel table against Policy.Decide for any
// policy that parses and any destination.
func FuzzCompile(f *testing.F) {
	f.Add([]byte(samplePolicy), []byte{93, 184, 216, 7}, uint8(1), uint16(443))
	f.Add([]byte("default: allow\nallow_metadata: true\nrules:\n  - deny: peer:*\n"), []byte{169, 254, 169, 254}, uint8(2), uint16(53))
	f.Add([]byte("rules:\n  - allow: fe80::/10\n    proto: icmp\n"), netip.MustParseAddr("fe80::1").AsSlice(), uint8(3), uint16(0))
	f.Add([]byte("rules:\n  - allow: 64:ff9b::/96\n"), netip.MustParseAddr("64:ff9b::7f00:1").AsSlice(), uint8(1), uint16(80))
	peers := map[string][]netip.Addr{"web-1": {netip.MustParseAddr("100.64.0.5")}}
	hosts := []netip.Addr{netip.MustParseAddr("192.0.2.10")}
	f.Fuzz(func(t *testing.T, src, addr []byte, proto uint8, port uint16) {
		a, ok := netip.AddrFromSlice(addr)
		if !ok || proto < 1 || proto > 3 {
			return
		}
		p, err := policy.Parse("f.yaml", src)
		if err != nil {
			return
		}
		tab, err := compile(p, compileInput{peers: peers, hosts: hosts})
		if err != nil {
			return
		}
		pr := policy.Proto(proto)
		want := p.Decide(dest(p, a, pr, port, peers, hosts))
		allow, why := tab.lookup(a, pr, port)
		if allow != want.Allow || why != want.Rule {
			t.Fatalf("%s %s port %d: table %v %q, Decide %v %q", a, pr, port, allow, why, want.Allow, want.Rule)
		}
	})
}
