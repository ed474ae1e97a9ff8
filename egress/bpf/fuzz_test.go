package bpf

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
