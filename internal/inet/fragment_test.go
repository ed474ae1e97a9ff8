package inet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Options for the tests (RFC 791 section 3.1): the copied bit is 0x80 in
// the type.
var (
	optNOP         = []byte{1}
	optRecordRoute = []byte{7, 7, 4, 0, 0, 0, 0}                // not copied
	optRouterAlert = []byte{148, 4, 0, 0}                       // copied (RFC 2113)
	optLSRR        = []byte{131, 7, 4, 192, 0, 2, 1}            // copied
	optTimestamp   = []byte{68, 8, 5, 0, 0, 0, 0, 0}            // not copied
	optSecurity    = []byte{130, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0} // copied
)

// ipv4Packet builds an IPv4 packet with options opts (padded with EOL),
// flags and offset fo (the raw header word) and n bytes of patterned data.
func ipv4Packet(fo uint16, n int, opts ...[]byte) []byte {
	var o []byte
	for _, b := range opts {
		o = append(o, b...)
	}
	hl := header.IPv4MinimumSize + (len(o)+3)&^3
	p := make([]byte, hl+n)
	p[0] = 0x40 | byte(hl/4)
	binary.BigEndian.PutUint16(p[2:], uint16(hl+n))
	binary.BigEndian.PutUint16(p[4:], 0xbeef)
	binary.BigEndian.PutUint16(p[6:], fo)
	p[8], p[9] = 64, 17
	copy(p[12:], []byte{100, 64, 0, 1, 100, 64, 1, 3})
	copy(p[header.IPv4MinimumSize:], o)
	for i := range n {
		p[hl+i] = byte(i*7 + i/251)
	}
	SetIPv4Checksum(p)
	return p
}

const ipv4MF = 0x2000

// checkFragments checks what every fragment of pkt must be and returns
// the data they reassemble to, from pkt's own offset on. It compares by
// hand, as the fuzz test calls it for thousands of fragments.
func checkFragments(t *testing.T, pkt []byte, mtu int, frags [][]byte) []byte {
	t.Helper()
	orig := header.IPv4(pkt)
	data := []byte{}
	for i, f := range frags {
		ip := header.IPv4(f)
		if len(f) < header.IPv4MinimumSize || len(f) > mtu {
			t.Fatalf("fragment %d: %d bytes, MTU %d", i, len(f), mtu)
		}
		hl := int(ip.HeaderLength())
		if hl < header.IPv4MinimumSize || hl > len(f) || int(ip.TotalLength()) != len(f) {
			t.Fatalf("fragment %d: header length %d, total length %d in %d bytes", i, hl, ip.TotalLength(), len(f))
		}
		if !ip.IsChecksumValid() {
			t.Fatalf("fragment %d: bad checksum", i)
		}
		if !bytes.Equal(pkt[12:20], f[12:20]) || orig.ID() != ip.ID() || orig.Protocol() != ip.Protocol() || orig.TTL() != ip.TTL() {
			t.Fatalf("fragment %d: header %x of %x", i, f[:hl], pkt[:orig.HeaderLength()])
		}
		if fo := binary.BigEndian.Uint16(f[6:]); fo&^(0x1fff|ipv4MF) != 0 {
			t.Fatalf("fragment %d: flags and offset %#04x: DF or the reserved bit set", i, fo)
		}
		if want := int(orig.FragmentOffset()) + len(data); int(ip.FragmentOffset()) != want {
			t.Fatalf("fragment %d: offset %d, want %d", i, ip.FragmentOffset(), want)
		}
		last := i == len(frags)-1
		if ip.More() != (!last || orig.More()) {
			t.Fatalf("fragment %d of %d: MF %v", i, len(frags), ip.More())
		}
		if !last && (len(f)-hl)%8 != 0 {
			t.Fatalf("fragment %d: %d bytes of data, not a multiple of 8", i, len(f)-hl)
		}
		data = append(data, f[hl:]...)
	}
	return data
}

func TestFragmentIPv4(t *testing.T) {
	tests := []struct {
		name      string
		pkt       []byte
		mtu       int
		wantSizes []int // of the fragments, headers included
		wantErr   error
	}{
		{name: "exact fit", pkt: ipv4Packet(0, 1356), mtu: 1376, wantSizes: []int{1376}},
		{name: "one byte over", pkt: ipv4Packet(0, 1357), mtu: 1376, wantSizes: []int{1372, 25}},
		{name: "DF set: cleared", pkt: ipv4Packet(0x4000, 1380), mtu: 1376, wantSizes: []int{1372, 48}},
		{name: "a middle fragment split further", pkt: ipv4Packet(ipv4MF|100, 3000), mtu: 1280, wantSizes: []int{1276, 1276, 508}},
		{name: "a last fragment split further", pkt: ipv4Packet(100, 3000), mtu: 1280, wantSizes: []int{1276, 1276, 508}},
		{name: "no data", pkt: ipv4Packet(0, 0), mtu: 576, wantSizes: []int{20}},
		{name: "options, later fragments' headers shorter", pkt: ipv4Packet(0, 1500, optNOP, optRecordRoute, optRouterAlert, optLSRR), mtu: 576, wantSizes: []int{576, 576, 452}},
		{name: "no copied options: later headers plain", pkt: ipv4Packet(0, 1500, optRecordRoute, optTimestamp), mtu: 576, wantSizes: []int{572, 572, 432}},
		{name: "smallest MTU", pkt: ipv4Packet(0, 20), mtu: 28, wantSizes: []int{28, 28, 24}},
		{name: "smallest MTU with options", pkt: ipv4Packet(0, 40, optRecordRoute, optLSRR, optTimestamp), mtu: 52, wantSizes: []int{52, 52, 36}},
		{name: "MTU one byte too small", pkt: ipv4Packet(0, 20), mtu: 27, wantErr: ErrFragmentMTU},
		{name: "MTU smaller than the header", pkt: ipv4Packet(0, 20), mtu: 10, wantErr: ErrFragmentMTU},
		{name: "MTU too small for the header with options", pkt: ipv4Packet(0, 40, optRecordRoute, optLSRR, optTimestamp), mtu: 51, wantErr: ErrFragmentMTU},
		{name: "ends at the datagram limit", pkt: ipv4Packet(64000/8, MaxIPv4Datagram-20-64000), mtu: 576, wantSizes: []int{572, 572, 431}},
		{name: "ends one byte past it", pkt: ipv4Packet(64000/8, MaxIPv4Datagram-20-64000+1), mtu: 576, wantErr: ErrPastDatagramLimit},
		{name: "with options, ends at the limit", pkt: ipv4Packet(64000/8, MaxIPv4Datagram-40-64000, optLSRR, optRecordRoute, optRouterAlert), mtu: 1500, wantSizes: []int{1496, 71}},
		{name: "with options, one byte past it", pkt: ipv4Packet(64000/8, MaxIPv4Datagram-40-64000+1, optLSRR, optRecordRoute, optRouterAlert), mtu: 1500, wantErr: ErrPastDatagramLimit},
		{name: "at the last offset", pkt: ipv4Packet(0x1fff, 1500), mtu: 576, wantErr: ErrPastDatagramLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := bytes.Clone(tt.pkt)
			frags, err := FragmentIPv4(tt.pkt, tt.mtu, 0, nil)
			assert.Equal(t, orig, tt.pkt, "the packet changed")
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Nil(t, frags)
				return
			}
			require.NoError(t, err)
			var sizes []int
			for _, f := range frags {
				sizes = append(sizes, len(f))
			}
			assert.Equal(t, tt.wantSizes, sizes)
			hl := header.IPv4(tt.pkt).HeaderLength()
			assert.Equal(t, tt.pkt[hl:], checkFragments(t, tt.pkt, tt.mtu, frags))
		})
	}
}

// TestFragmentIPv4Options: the first fragment carries every option, later
// ones only those with the copied bit, EOL-padded to 4 bytes.
func TestFragmentIPv4Options(t *testing.T) {
	tests := []struct {
		name      string
		opts      [][]byte
		wantLater []byte // later fragments' options, padding included
	}{
		{name: "copied and not", opts: [][]byte{optNOP, optRecordRoute, optRouterAlert, optLSRR},
			wantLater: append(append(bytes.Clone(optRouterAlert), optLSRR...), 0)},
		{name: "none copied", opts: [][]byte{optRecordRoute, optTimestamp}, wantLater: []byte{}},
		{name: "all copied", opts: [][]byte{optSecurity, optRouterAlert}, wantLater: append(append(bytes.Clone(optSecurity), optRouterAlert...), 0)},
		{name: "nothing after EOL is read", opts: [][]byte{optRouterAlert, {0, 131, 0xff}}, wantLater: optRouterAlert},
		{name: "NOPs dropped", opts: [][]byte{optNOP, optNOP, optNOP, optRouterAlert, optNOP}, wantLater: optRouterAlert},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkt := ipv4Packet(0, 2000, tt.opts...)
			hl := int(header.IPv4(pkt).HeaderLength())
			frags, err := FragmentIPv4(pkt, 576, 0, nil)
			require.NoError(t, err)
			require.Len(t, frags, 4)
			assert.Equal(t, pkt[20:hl], []byte(frags[0][20:hl]), "the first fragment's options")
			for i, f := range frags[1:] {
				fhl := header.IPv4(f).HeaderLength()
				assert.Equal(t, tt.wantLater, []byte(f[20:fhl]), "fragment %d's options", i+1)
			}
			assert.Equal(t, pkt[hl:], checkFragments(t, pkt, 576, frags))
		})
	}
}

func TestFragmentIPv4Malformed(t *testing.T) {
	good := ipv4Packet(0, 1500, optRouterAlert)
	with := func(f func(p []byte)) []byte {
		p := bytes.Clone(good)
		f(p)
		return p
	}
	tests := []struct {
		name    string
		pkt     []byte
		wantErr string
	}{
		{"empty", nil, "fragment ipv4: malformed ipv4 packet: 0 bytes do not hold their header"},
		{"shorter than a header", good[:19], "fragment ipv4: malformed ipv4 packet: 19 bytes do not hold their header"},
		{"header length under 20", with(func(p []byte) { p[0] = 0x44 }), "fragment ipv4: malformed ipv4 packet: 1524 bytes do not hold their header"},
		{"header past the packet", with(func(p []byte) { p[0] = 0x4f })[:50], "fragment ipv4: malformed ipv4 packet: 50 bytes do not hold their header"},
		{"IPv6", with(func(p []byte) { p[0] = 0x65 }), "fragment ipv4: malformed ipv4 packet: version 6"},
		{"total length under the header", with(func(p []byte) { binary.BigEndian.PutUint16(p[2:], 23) }), "fragment ipv4: malformed ipv4 packet: total length 23 with a 24-byte header in 1524 bytes"},
		{"total length past the buffer", good[:1000], "fragment ipv4: malformed ipv4 packet: total length 1524 with a 24-byte header in 1000 bytes"},
		{"option length 0", with(func(p []byte) { p[21] = 0 }), "fragment ipv4: malformed ipv4 packet: option 148 at header byte 20 runs past the 24-byte header"},
		{"option length 1", with(func(p []byte) { p[21] = 1 }), "fragment ipv4: malformed ipv4 packet: option 148 at header byte 20 runs past the 24-byte header"},
		{"option past the header", with(func(p []byte) { p[21] = 5 }), "fragment ipv4: malformed ipv4 packet: option 148 at header byte 20 runs past the 24-byte header"},
		{"option type in the last byte", with(func(p []byte) { p[20], p[21], p[22], p[23] = 1, 1, 1, 130 }), "fragment ipv4: malformed ipv4 packet: option 130 at header byte 23 runs past the 24-byte header"},
		{"MTU", good, "fragment ipv4: mtu 31 with a 24-byte header: mtu leaves no room for 8 bytes of data"},
		{"datagram limit", ipv4Packet(65000/8, 1000), "fragment ipv4: 1000 bytes of data at offset 65000: ends past the 65535-byte datagram limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mtu := 576
			if tt.name == "MTU" {
				mtu = 31
			}
			frags, err := FragmentIPv4(tt.pkt, mtu, 0, nil)
			require.EqualError(t, err, tt.wantErr)
			assert.Nil(t, frags)
		})
	}
}

// TestFragmentIPv4Headroom: fragments start headroom bytes into buffers
// from alloc, one per fragment, and nothing is allocated for a refused
// packet.
func TestFragmentIPv4Headroom(t *testing.T) {
	var sizes []int
	alloc := func(n int) []byte {
		sizes = append(sizes, n)
		b := make([]byte, n)
		for i := range b {
			b[i] = 0xee // what a pool might hand back
		}
		return b
	}
	pkt := ipv4Packet(0, 3000, optRecordRoute, optRouterAlert)
	bufs, err := FragmentIPv4(pkt, 1280, 14, alloc)
	require.NoError(t, err)
	require.Len(t, bufs, 3)
	frags := make([][]byte, len(bufs))
	for i, b := range bufs {
		assert.Equal(t, bytes.Repeat([]byte{0xee}, 14), b[:14], "buffer %d's headroom", i)
		frags[i] = b[14:]
		assert.Equal(t, len(b), sizes[i])
	}
	assert.Equal(t, pkt[32:], checkFragments(t, pkt, 1280, frags))

	sizes = nil
	_, err = FragmentIPv4(ipv4Packet(0x1fff, 1500), 576, 14, alloc)
	require.ErrorIs(t, err, ErrPastDatagramLimit)
	assert.Empty(t, sizes)
}

// TestFragmentIPv4Trailing: bytes past the total length are not data.
func TestFragmentIPv4Trailing(t *testing.T) {
	pkt := append(ipv4Packet(0, 100), make([]byte, 1400)...)
	frags, err := FragmentIPv4(pkt, 576, 0, nil)
	require.NoError(t, err)
	require.Len(t, frags, 1)
	assert.Equal(t, pkt[20:120], checkFragments(t, pkt[:120], 576, frags))
}

// TestFragmentIPv4Allocs: with a nil alloc the fragments share one
// allocation, and the slice of them is the other.
func TestFragmentIPv4Allocs(t *testing.T) {
	pkt := ipv4Packet(0, 3000, optLSRR)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := FragmentIPv4(pkt, 1280, 0, nil); err != nil {
			t.Fatal(err)
		}
	})
	assert.LessOrEqual(t, allocs, 2.0)
}

// FuzzFragmentIPv4: whatever the packet and MTU, FragmentIPv4 does not
// panic or change its input, refuses with one of its errors, or returns
// fragments no larger than the MTU, with valid checksums, that reassemble
// to the packet's data.
func FuzzFragmentIPv4(f *testing.F) {
	f.Add(ipv4Packet(0, 1500), uint16(576), uint8(0))
	f.Add(ipv4Packet(ipv4MF|3, 100), uint16(68), uint8(14))
	f.Add(ipv4Packet(0, 3000, optNOP, optRecordRoute, optRouterAlert, optLSRR), uint16(1280), uint8(14))
	f.Add(ipv4Packet(0, 200, optSecurity, optTimestamp, optSecurity), uint16(100), uint8(0))
	f.Add(ipv4Packet(64000/8, MaxIPv4Datagram-20-64000), uint16(576), uint8(0))
	f.Add([]byte{0x46, 0, 0, 24, 0, 0, 0, 0, 64, 17, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 131, 3}, uint16(28), uint8(0))
	f.Fuzz(func(t *testing.T, pkt []byte, mtu16 uint16, headroom uint8) {
		mtu := int(mtu16)
		orig := bytes.Clone(pkt)
		bufs, err := FragmentIPv4(pkt, mtu, int(headroom), nil)
		require.Equal(t, orig, pkt, "the packet changed")
		if err != nil {
			if !errors.Is(err, ErrMalformedIPv4) && !errors.Is(err, ErrFragmentMTU) && !errors.Is(err, ErrPastDatagramLimit) {
				t.Fatalf("unexpected error %v", err)
			}
			require.Nil(t, bufs)
			return
		}
		frags := make([][]byte, len(bufs))
		for i, b := range bufs {
			frags[i] = b[headroom:]
		}
		ip := header.IPv4(pkt)
		data := pkt[ip.HeaderLength():ip.TotalLength()]
		require.Equal(t, data, checkFragments(t, pkt[:ip.TotalLength()], mtu, frags))
	})
}

// BenchmarkFragmentIPv4: a 1400-byte packet split for the node's QUIC
// relay MTU (1376), a 3000-byte one for a 1280-byte link, and one with
// options, with one allocation for all fragments (alloc nil).
func BenchmarkFragmentIPv4(b *testing.B) {
	for _, bc := range []struct {
		name string
		pkt  []byte
		mtu  int
	}{
		{"1400at1376", ipv4Packet(0, 1380), 1376},
		{"3000at1280", ipv4Packet(0, 2980), 1280},
		{"options3000at1280", ipv4Packet(0, 2960, optRecordRoute, optLSRR), 1280},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.pkt)))
			for b.Loop() {
				if _, err := FragmentIPv4(bc.pkt, bc.mtu, 0, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
