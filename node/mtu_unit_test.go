package node

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/device"

	"github.com/latticelab/lattice/internal/inet"
)

type fixedTransport string

func (f fixedTransport) Transport() string { return string(f) }

// tcpSyn4 is an IPv4 TCP SYN from src to dst with options opts (padded to
// a multiple of 4) and a valid checksum.
func tcpSyn4(src, dst string, opts []byte) []byte {
	for len(opts)%4 != 0 {
		opts = append(opts, 0)
	}
	tcp := make([]byte, 20+len(opts))
	binary.BigEndian.PutUint16(tcp[0:2], 40000)
	binary.BigEndian.PutUint16(tcp[2:4], 80)
	tcp[12], tcp[13] = byte(len(tcp)/4)<<4, tcpFlagSYN
	copy(tcp[20:], opts)
	p := ipv4(src, dst, 6, ipv4DF, tcp)
	setTCPChecksum(p)
	return p
}

func setTCPChecksum(p []byte) {
	hlen, _, _ := ipHeader(p)
	tcp := p[hlen:]
	tcp[16], tcp[17] = 0, 0
	pseudo := make([]byte, 0, 12+len(tcp))
	pseudo = append(pseudo, p[12:20]...)
	pseudo = append(pseudo, 0, 6, byte(len(tcp)>>8), byte(len(tcp)))
	pseudo = append(pseudo, tcp...)
	binary.BigEndian.PutUint16(tcp[16:18], inet.Checksum(pseudo))
}

func tcpChecksumOK(p []byte) bool {
	hlen, _, _ := ipHeader(p)
	tcp := p[hlen:]
	pseudo := append(append(append([]byte(nil), p[12:20]...), 0, 6, byte(len(tcp)>>8), byte(len(tcp))), tcp...)
	return inet.Checksum(pseudo) == 0
}

// optMSS is the MSS option's kind (RFC 9293 section 3.2): mssOf reads it
// on its own, not through the code under test.
const optMSS = 2

func mssOf(p []byte) int {
	hlen, _, _ := ipHeader(p)
	tcp := p[hlen:]
	for i := 20; i+3 < int(tcp[12]>>4)*4; {
		switch tcp[i] {
		case 0:
			return 0
		case 1:
			i++
			continue
		}
		if tcp[i] == optMSS {
			return int(binary.BigEndian.Uint16(tcp[i+2:]))
		}
		i += int(tcp[i+1])
	}
	return 0
}

func TestPeerMTUOutbound(t *testing.T) {
	const self, quicPeer, directPeer = "100.64.0.1", "100.64.1.3", "100.64.1.4"
	big := make([]byte, 1400-20-8) // a 1400-byte UDP packet
	for i := range big {
		big[i] = byte(i)
	}
	udp := append([]byte{0x9c, 0x40, 0, 7, 0x05, 0x74, 0, 0}, big...)
	tests := []struct {
		name      string
		transport string
		pkt       []byte
		wantSizes []int // the sizes Read returns, fragments included
		wantReply []byte
		wantMSS   int
	}{
		{"SYN to a QUIC-relayed peer: MSS clamped", "quic", tcpSyn4(self, quicPeer, []byte{2, 4, 0x05, 0x8c}), []int{44}, nil, QUICRelayMTU - 40},
		{"SYN with a NOP first (odd offset): clamped", "quic", tcpSyn4(self, quicPeer, []byte{1, 2, 4, 0x05, 0x8c}), []int{48}, nil, QUICRelayMTU - 40},
		{"SYN with a small MSS: left alone", "quic", tcpSyn4(self, quicPeer, []byte{2, 4, 0x02, 0x00}), []int{44}, nil, 512},
		{"SYN to a direct peer: left alone", "quic", tcpSyn4(self, directPeer, []byte{2, 4, 0x05, 0x8c}), []int{44}, nil, 1420},
		{"SYN over a TCP relay: left alone", "tcp", tcpSyn4(self, quicPeer, []byte{2, 4, 0x05, 0x8c}), []int{44}, nil, 1420},
		{"TCP with DF and too big: fragmentation needed", "quic", ipv4(self, quicPeer, 6, ipv4DF, udp), []int{0}, []byte{3, icmpFragNeeded}, 0},
		{"UDP with DF and too big: fragmented (DF cleared)", "quic", ipv4(self, quicPeer, 17, ipv4DF, udp), []int{1372, 48}, nil, 0},
		{"no DF and too big: fragmented", "quic", ipv4(self, quicPeer, 17, 0, udp), []int{1372, 48}, nil, 0},
		{"too big to a direct peer: passes", "quic", ipv4(self, directPeer, 17, ipv4DF, udp), []int{1400}, nil, 0},
		{"too big over a TCP relay: passes", "tcp", ipv4(self, quicPeer, 17, ipv4DF, udp), []int{1400}, nil, 0},
		{"no data within the total length: trimmed, not split", "quic", withTotalLength(ipv4(self, quicPeer, 17, 0, udp), 20), []int{20}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeTUN{in: make(chan []byte, 1)}
			u := newUnreachableTUN(f)
			defer u.Close()
			u.mtu.relay = fixedTransport(tt.transport)
			u.setPath(netip.MustParseAddr(quicPeer), &Path{})
			direct := &Path{}
			a := netip.MustParseAddrPort("192.0.2.9:51820")
			direct.direct.Store(&a)
			u.setPath(netip.MustParseAddr(directPeer), direct)

			f.in <- append([]byte(nil), tt.pkt...)
			const off = device.MessageTransportHeaderSize
			bufs, sizes := [][]byte{make([]byte, 2048), make([]byte, 2048)}, []int{0, 0}
			n, err := u.Read(bufs, sizes, off)
			require.NoError(t, err)
			require.Equal(t, tt.wantSizes, sizes[:n])
			if tt.wantMSS != 0 {
				got := bufs[0][off : off+sizes[0]]
				assert.Equal(t, tt.wantMSS, mssOf(got))
				assert.True(t, tcpChecksumOK(got), "TCP checksum")
			}
			if n == 2 { // fragments: reassemble and compare
				f0, f1 := bufs[0][off:off+sizes[0]], bufs[1][off:off+sizes[1]]
				assert.Zero(t, inet.Checksum(f0[:20]))
				assert.Zero(t, inet.Checksum(f1[:20]))
				assert.Equal(t, uint16(ipv4MF), binary.BigEndian.Uint16(f0[6:8]), "MF, DF cleared")
				assert.Equal(t, uint16((1372-20)/8), binary.BigEndian.Uint16(f1[6:8]))
				assert.Equal(t, tt.pkt[20:], append(append([]byte(nil), f0[20:]...), f1[20:]...))
			}
			if tt.wantReply == nil {
				require.Never(t, func() bool { return len(f.writes()) > 0 }, 30*time.Millisecond, 5*time.Millisecond)
				return
			}
			require.Eventually(t, func() bool { return len(f.writes()) == 1 }, time.Second, time.Millisecond)
			r := f.writes()[0]
			assert.Zero(t, inet.Checksum(r[:20]))
			assert.Equal(t, tt.wantReply, r[20:22])
			assert.Equal(t, uint16(QUICRelayMTU), binary.BigEndian.Uint16(r[26:28]), "next-hop MTU")
			assert.Zero(t, inet.Checksum(r[20:]))
			assert.Equal(t, netip.MustParseAddr(quicPeer).AsSlice(), r[12:16])
		})
	}
}

// TestPeerMTUPendingFragments: fragments that find no free slot in the
// batch come out of the next Read, before anything new is read.
func TestPeerMTUPendingFragments(t *testing.T) {
	f := &fakeTUN{in: make(chan []byte, 1)}
	u := newUnreachableTUN(f)
	defer u.Close()
	u.mtu.relay = fixedTransport("quic")
	u.setPath(netip.MustParseAddr("100.64.1.3"), &Path{})
	payload := make([]byte, 4000)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	f.in <- ipv4("100.64.0.1", "100.64.1.3", 17, 0, payload)
	var got []byte
	bufs, sizes := [][]byte{make([]byte, 8192)}, []int{0}
	for range 3 {
		n, err := u.Read(bufs, sizes, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.LessOrEqual(t, sizes[0], QUICRelayMTU)
		got = append(got, bufs[0][20:sizes[0]]...)
	}
	assert.Equal(t, payload, got)
	assert.Empty(t, u.mtu.pending)
}

func TestPeerMTUInboundSYN(t *testing.T) {
	f := &fakeTUN{}
	u := newUnreachableTUN(f)
	defer u.Close()
	u.mtu.relay = fixedTransport("quic")
	u.setPath(netip.MustParseAddr("100.64.1.3"), &Path{})
	syn := tcpSyn4("100.64.1.3", "100.64.0.1", []byte{2, 4, 0x05, 0x8c, 1, 3, 3, 7})
	_, err := u.Write([][]byte{append(make([]byte, 16), syn...)}, 16)
	require.NoError(t, err)
	w := f.writes()
	require.Len(t, w, 1)
	assert.Equal(t, QUICRelayMTU-40, mssOf(w[0]))
	assert.True(t, tcpChecksumOK(w[0]))
}

func TestPacketTooBig6(t *testing.T) {
	p := make([]byte, 1500)
	p[0], p[6], p[7] = 0x60, 17, 64
	binary.BigEndian.PutUint16(p[4:6], 1460)
	src, dst := netip.MustParseAddr("fd7a::1").As16(), netip.MustParseAddr("fd7a::2").As16()
	copy(p[8:24], src[:])
	copy(p[24:40], dst[:])
	r := packetTooBig6(p, QUICRelayMTU)
	require.NotNil(t, r)
	r = r[device.MessageTransportOffsetContent:]
	assert.LessOrEqual(t, len(r), 1280)
	assert.Equal(t, dst[:], r[8:24])
	assert.Equal(t, src[:], r[24:40])
	assert.Equal(t, byte(2), r[40])
	assert.Equal(t, uint32(QUICRelayMTU), binary.BigEndian.Uint32(r[44:48]))
	pseudo := append(append(append([]byte(nil), r[8:40]...), 0, 0, byte((len(r)-40)>>8), byte(len(r)-40), 0, 0, 0, 58), r[40:]...)
	assert.Zero(t, inet.Checksum(pseudo), "ICMPv6 checksum")
	q := append([]byte(nil), p...)
	q[6], q[40] = 58, 1 // an ICMPv6 error: none about it
	assert.Nil(t, packetTooBig6(q, QUICRelayMTU))
}

// TestFragmentIPv4Offsets: fragments of a fragment continue its offset,
// and one whose data would end past the largest IPv4 datagram is not split
// (its pieces' offsets do not fit the 13-bit field: the last ones used to
// spill into the flags, turning on MF and a reserved bit).
func TestFragmentIPv4Offsets(t *testing.T) {
	tests := []struct {
		name    string
		off     int // of the packet's data, in bytes
		payload int
		wantNil bool
	}{
		{name: "whole packet", off: 0, payload: 3000},
		{name: "ends at the largest datagram", off: 64000, payload: inet.MaxIPv4Datagram - 20 - 64000},
		{name: "ends one byte past it", off: 64000, payload: inet.MaxIPv4Datagram - 20 - 64000 + 1, wantNil: true},
		{name: "at the last offset", off: 0x1fff * 8, payload: 1500, wantNil: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkt := ipv4("100.64.0.1", "100.64.1.3", 17, uint16(tt.off/8), make([]byte, tt.payload))
			frags := fragmentIPv4(pkt, QUICRelayMTU)
			if tt.wantNil {
				if frags != nil {
					last := frags[len(frags)-1]
					t.Errorf("split into %d fragments, the last with flags and offset %#04x", len(frags), binary.BigEndian.Uint16(last[6:8]))
				}
				return
			}
			require.NotEmpty(t, frags)
			want := tt.off
			for i, f := range frags {
				fo := binary.BigEndian.Uint16(f[6:8])
				assert.Equal(t, want, int(fo&0x1fff)*8, "fragment %d offset", i)
				assert.Equal(t, i < len(frags)-1, fo&ipv4MF != 0, "fragment %d MF", i)
				assert.Zero(t, fo&^(0x1fff|ipv4MF), "fragment %d DF and reserved bits", i)
				want += len(f) - 20
			}
			assert.Equal(t, tt.off+tt.payload, want)
		})
	}
}

// withTotalLength sets IPv4 packet p's total length to n, leaving what
// follows in the buffer.
func withTotalLength(p []byte, n int) []byte {
	binary.BigEndian.PutUint16(p[2:4], uint16(n))
	p[10], p[11] = 0, 0
	binary.BigEndian.PutUint16(p[10:12], inet.Checksum(p[:20]))
	return p
}

// TestFragmentIPv4CopiedOptions: fragments after the first carry only the
// options whose copied bit is set (RFC 791 section 3.1), a record route
// staying in the first and a router alert going into each.
func TestFragmentIPv4CopiedOptions(t *testing.T) {
	opts := []byte{7, 7, 4, 0, 0, 0, 0, 148, 4, 0, 0, 0} // record route, router alert, EOL
	data := make([]byte, 2000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	pkt := ipv4("100.64.0.1", "100.64.1.3", 17, 0, append(append([]byte(nil), opts...), data...))
	pkt[0] = 0x40 | byte((20+len(opts))/4)
	pkt[10], pkt[11] = 0, 0
	binary.BigEndian.PutUint16(pkt[10:12], inet.Checksum(pkt[:20+len(opts)]))

	frags := fragmentIPv4(pkt, QUICRelayMTU)
	require.Len(t, frags, 2)
	assert.Equal(t, pkt[0], frags[0][0], "the first fragment's IHL: all options")
	assert.Equal(t, opts, frags[0][20:32], "the first fragment's options")
	assert.Equal(t, byte(0x46), frags[1][0], "the second fragment's IHL: 24 bytes")
	assert.Equal(t, []byte{148, 4, 0, 0}, frags[1][20:24], "the second fragment's options")
	var got []byte
	for i, f := range frags {
		hl := int(f[0]&0x0f) * 4
		assert.Zero(t, inet.Checksum(f[:hl]), "fragment %d checksum", i)
		assert.Equal(t, len(f), int(binary.BigEndian.Uint16(f[2:4])), "fragment %d total length", i)
		assert.LessOrEqual(t, len(f), QUICRelayMTU)
		got = append(got, f[hl:]...)
	}
	assert.Equal(t, data, got)
}

// FuzzPeerMTU: the per-peer MTU's packet handling never panics on any
// input, fragments reassemble to the packet's data and each fits the MTU,
// and a clamped SYN keeps a valid checksum.
func FuzzPeerMTU(f *testing.F) {
	f.Add(tcpSyn4("100.64.0.1", "100.64.1.3", []byte{1, 2, 4, 0x05, 0x8c}), 1378)
	f.Add(ipv4("100.64.0.1", "100.64.1.3", 17, 0, make([]byte, 1500)), 600)
	f.Add(ipv4("100.64.0.1", "100.64.1.3", 17, ipv4MF|3, make([]byte, 100)), 68)
	f.Add([]byte{0x60, 0, 0, 0, 0, 20, 6, 64}, 1280)
	f.Add(ipv4("100.64.0.1", "100.64.1.3", 17, 0x1fff, make([]byte, 1500)), 600)
	f.Fuzz(func(t *testing.T, pkt []byte, mtu int) {
		mtu = 28 + (mtu&0xffff)%2000
		orig := append([]byte(nil), pkt...)
		if frags := fragmentIPv4(pkt, mtu); frags != nil {
			hlen := int(pkt[0]&0x0f) * 4
			total := int(binary.BigEndian.Uint16(pkt[2:4]))
			base := int(binary.BigEndian.Uint16(pkt[6:8])&0x1fff) * 8
			var data []byte
			for _, fr := range frags {
				if len(fr) > mtu {
					t.Fatalf("a %d-byte fragment over MTU %d", len(fr), mtu)
				}
				if off := int(binary.BigEndian.Uint16(fr[6:8])&0x1fff) * 8; off != base+len(data) {
					t.Fatalf("a fragment at offset %d, want %d", off, base+len(data))
				}
				data = append(data, fr[int(fr[0]&0x0f)*4:]...) // its own header: later ones drop uncopied options
			}
			if !bytes.Equal(data, pkt[hlen:total]) {
				t.Fatal("fragments do not reassemble to the packet")
			}
		}
		if !bytes.Equal(pkt, orig) {
			t.Fatal("fragmentIPv4 changed its input")
		}
		if len(pkt) >= 20 && pkt[0]>>4 == 4 {
			_ = icmpv4Error(pkt, icmpFragNeeded, mtu)
		}
		_ = packetTooBig6(pkt, mtu)
		_, _, _ = ipAddrs(pkt)
		if tcpSYN(pkt) && pkt[0]>>4 == 4 {
			hlen := int(pkt[0]&0x0f) * 4
			setTCPChecksum(pkt)
			if clampMSS(pkt, mtu) && !tcpChecksumOK(pkt) {
				t.Fatalf("checksum broken by the clamp (header %d)", hlen)
			}
		} else {
			clampMSS(pkt, mtu)
		}
	})
}
