package inet

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// sum is a from-scratch ones' complement checksum, the test's oracle.
func sum(b []byte) uint16 {
	var acc uint32
	for i := 0; i+1 < len(b); i += 2 {
		acc += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		acc += uint32(b[len(b)-1]) << 8
	}
	for acc > 0xffff {
		acc = acc&0xffff + acc>>16
	}
	return ^uint16(acc)
}

// TestDeltaEdgeCases drives the ones' complement sum through 0x0000 and
// 0xFFFF and checks each update against recomputation.
func TestDeltaEdgeCases(t *testing.T) {
	words := []uint16{0x0000, 0x0001, 0x7fff, 0x8000, 0xfffe, 0xffff}
	for _, a := range words {
		for _, b := range words {
			for _, c := range words {
				if b == 0 && c == 0 {
					// All-zero data has checksum 0xFFFF, which equation 3
					// yields as 0x0000; no IPv4, TCP, UDP or ICMP header
					// is all zeros, so RFC 1624 leaves the case aside.
					continue
				}
				buf := []byte{byte(a >> 8), byte(a), byte(b >> 8), byte(b), 0, 0}
				binary.BigEndian.PutUint16(buf[4:], sum(buf))
				var d Delta
				d.Word(a, c)
				binary.BigEndian.PutUint16(buf, c)
				d.Fix(buf, 4)
				assert.Zero(t, sum(buf), "%#x→%#x with %#x", a, c, b)
			}
		}
	}
}

// TestDeltaRandomized rewrites random words of random buffers, several per
// Delta, and checks the updated checksum verifies.
func TestDeltaRandomized(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		buf := make([]byte, 2*(2+rng.IntN(30)))
		for i := range buf[2:] {
			buf[2+i] = byte(rng.IntN(256))
		}
		binary.BigEndian.PutUint16(buf, sum(buf[2:]))
		var d Delta
		for range 1 + rng.IntN(4) {
			off := 2 + 2*rng.IntN(len(buf)/2-1)
			old := binary.BigEndian.Uint16(buf[off:])
			nw := uint16(rng.IntN(65536))
			binary.BigEndian.PutUint16(buf[off:], nw)
			d.Word(old, nw)
		}
		d.Fix(buf, 0)
		if !assert.Zero(t, sum(buf), "buf %x", buf) {
			return
		}
	}
}

func TestDeltaAddr4AndUpdate(t *testing.T) {
	var d Delta
	d.Addr4([4]byte{192, 168, 1, 2}, [4]byte{203, 0, 113, 10})
	var w Delta
	w.Word(0xc0a8, 0xcb00)
	w.Word(0x0102, 0x710a)
	assert.Equal(t, w, d)
	assert.Equal(t, w.Apply(0x1234), Update(Update(0x1234, 0xc0a8, 0xcb00), 0x0102, 0x710a))
	assert.Equal(t, uint16(0x1234), Delta(0).Apply(0x1234), "the zero Delta changes nothing")
}

func TestFixUDP(t *testing.T) {
	b := []byte{0, 0}
	var d Delta
	d.Word(1, 2)
	d.FixUDP(b, 0)
	assert.Equal(t, []byte{0, 0}, b, "no checksum stays no checksum")

	// A checksum whose update is 0x0000 goes out as 0xFFFF.
	binary.BigEndian.PutUint16(b, 0x0001)
	d = 0
	d.Word(0x0000, 0x0001) // adds 1 to the sum: the checksum drops by 1
	d.FixUDP(b, 0)
	assert.Equal(t, []byte{0xff, 0xff}, b)
}

func TestPseudoHeaderSum(t *testing.T) {
	v4 := make([]byte, header.IPv4MinimumSize)
	header.IPv4(v4).Encode(&header.IPv4Fields{
		SrcAddr: tcpip.AddrFrom4([4]byte{192, 168, 1, 2}), DstAddr: tcpip.AddrFrom4([4]byte{203, 0, 113, 100})})
	v6 := make([]byte, header.IPv6MinimumSize)
	header.IPv6(v6).Encode(&header.IPv6Fields{
		SrcAddr: tcpip.AddrFrom16([16]byte{0xfd, 0x7a, 15: 2}), DstAddr: tcpip.AddrFrom16([16]byte{0xfd, 0x7a, 15: 3})})
	for _, tc := range []struct {
		name     string
		ip       []byte
		src, dst tcpip.Address
		proto    tcpip.TransportProtocolNumber
		n        int
	}{
		{"udp4", v4, header.IPv4(v4).SourceAddress(), header.IPv4(v4).DestinationAddress(), header.UDPProtocolNumber, 108},
		{"tcp4 no length", v4, header.IPv4(v4).SourceAddress(), header.IPv4(v4).DestinationAddress(), header.TCPProtocolNumber, 0},
		{"tcp6", v6, header.IPv6(v6).SourceAddress(), header.IPv6(v6).DestinationAddress(), header.TCPProtocolNumber, 1460},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := header.PseudoHeaderChecksum(tc.proto, tc.src, tc.dst, uint16(tc.n))
			assert.Equal(t, want, PseudoHeaderSum(tc.ip, uint8(tc.proto), tc.n))
		})
	}
}

func TestSetIPv4Checksum(t *testing.T) {
	b := make([]byte, 24)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: 24, TTL: 64, Protocol: 17,
		SrcAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 1}), DstAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 2}),
		Options: header.IPv4OptionsSerializer{&header.IPv4SerializableRouterAlertOption{}}})
	ip.SetChecksum(0xdead)
	SetIPv4Checksum(ip)
	assert.True(t, ip.IsChecksumValid())
	assert.Zero(t, sum(b[:ip.HeaderLength()]))
}

// TestChecksum: RFC 1071's example bytes, and a header holding its own
// checksum sums to zero.
func TestChecksum(t *testing.T) {
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7} // RFC 1071 section 3
	assert.Equal(t, ^uint16(0xddf2), Checksum(b))
	odd := []byte{0x45, 0x00, 0x01}
	assert.Equal(t, ^uint16(0x4500+0x0100), Checksum(odd), "an odd byte is padded with zero")
	h := []byte{0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0, 203, 0, 113, 1, 192, 168, 1, 2}
	c := Checksum(h)
	h[10], h[11] = byte(c>>8), byte(c)
	assert.Zero(t, Checksum(h))
}

func TestMSSOption(t *testing.T) {
	tcp := func(opts ...byte) []byte {
		b := make([]byte, 20+len(opts))
		b[12] = byte((20+len(opts))/4) << 4
		copy(b[20:], opts)
		return b
	}
	for _, tt := range []struct {
		name string
		tcp  []byte
		want int
	}{
		{"first option", tcp(2, 4, 5, 0xb4), 22},
		{"after NOPs and window scale", tcp(1, 1, 3, 3, 7, 2, 4, 5, 0xb4, 0, 0, 0), 27},
		{"none", tcp(1, 1, 1, 1), -1},
		{"end of options first", tcp(0, 0, 2, 4, 5, 0xb4, 0, 0), -1},
		{"wrong length", tcp(2, 3, 5, 0xb4), -1},
		{"option runs past the header", tcp(3, 9, 0, 0), -1},
		{"short header", make([]byte, 19), -1},
	} {
		assert.Equal(t, tt.want, MSSOption(tt.tcp), tt.name)
	}
}
