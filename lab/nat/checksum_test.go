package nat

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChecksumsAfterTranslation(t *testing.T) {
	tests := []struct {
		name  string
		out   []byte // from inside, creates the mapping
		reply []byte // from outside through it
	}{
		{"udp", udpPkt(inside1, remote1), udpPkt(remote1, ext1)},
		{"tcp", tcpPkt(inside1, remote1, tcpSYN), tcpPkt(remote1, ext1, tcpSYN|tcpACK)},
		{"icmp echo", icmpEcho(icmpEchoRequest, inside1.Addr(), remote1.Addr(), 5000), icmpEcho(icmpEchoReply, remote1.Addr(), public, 5000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, pa := range []PortAllocation{Preserve, Random} {
				n := newNAT(t, Config{PortAllocation: pa})
				out := append([]byte(nil), tt.out...)
				res := process(t, n, t0, out, FromInside) // process verifies checksums
				require.Equal(t, Forward, res.Verdict, res.Reason)
				src, _ := endpoints(out)
				assert.Equal(t, public, src.Addr())
				reply := append([]byte(nil), tt.reply...)
				binary.BigEndian.PutUint16(reply[22:], src.Port()) // TCP/UDP dst port
				if tt.name == "icmp echo" {
					binary.BigEndian.PutUint16(reply[24:], src.Port()) // echo id
				}
				finish(reply, false)
				res = process(t, n, t0, reply, FromOutside)
				require.Equal(t, Forward, res.Verdict, res.Reason)
				_, dst := endpoints(reply)
				assert.Equal(t, inside1.Addr(), dst.Addr())
				if tt.name != "icmp echo" {
					assert.Equal(t, inside1, dst)
				} else {
					assert.Equal(t, inside1.Port(), dst.Port(), "echo id restored")
				}
			}
		})
	}
}

func TestUDPZeroChecksumStaysZero(t *testing.T) {
	n := newNAT(t, Config{PortAllocation: Sequential})
	out := udpNoCsum(inside1, remote1)
	require.Equal(t, Forward, process(t, n, t0, out, FromInside).Verdict)
	assert.Zero(t, binary.BigEndian.Uint16(out[26:]))
	src, _ := endpoints(out)
	in := udpNoCsum(remote1, src)
	require.Equal(t, Forward, process(t, n, t0, in, FromOutside).Verdict)
	assert.Zero(t, binary.BigEndian.Uint16(in[26:]))
}

// TestChecksumsRandomized translates many random flows, including options
// and odd payload lengths, checking every checksum from scratch.
func TestChecksumsRandomized(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := newNAT(t, Config{PortAllocation: Random, Hairpin: true})
	addr := func(a, b byte) netip.Addr {
		return netip.AddrFrom4([4]byte{a, b, byte(rng.IntN(256)), byte(rng.IntN(256))})
	}
	for i := range 2000 {
		src := netip.AddrPortFrom(addr(10, byte(rng.IntN(256))), uint16(rng.IntN(65536)))
		dst := netip.AddrPortFrom(addr(byte(1+rng.IntN(9)), byte(rng.IntN(256))), uint16(rng.IntN(65536)))
		var pkt []byte
		switch i % 3 {
		case 0:
			pkt = udpPkt(src, dst)
		case 1:
			pkt = tcpPkt(src, dst, tcpSYN)
		default:
			pkt = icmpEcho(icmpEchoRequest, src.Addr(), dst.Addr(), src.Port())
		}
		// Random payload bytes, then valid checksums again.
		for j := len(pkt) - 3; j < len(pkt); j++ {
			pkt[j] = byte(rng.IntN(256))
		}
		finish(pkt, false)
		res := process(t, n, t0, pkt, FromInside)
		require.Equal(t, Forward, res.Verdict, res.Reason)

		// The reply, with the remote swapped in as source.
		ext, _ := endpoints(pkt)
		var reply []byte
		switch i % 3 {
		case 0:
			reply = udpPkt(dst, ext)
		case 1:
			reply = tcpPkt(dst, ext, tcpSYN|tcpACK)
		default:
			reply = icmpEcho(icmpEchoReply, dst.Addr(), public, ext.Port())
		}
		res = process(t, n, t0, reply, FromOutside)
		require.Equal(t, Forward, res.Verdict, res.Reason)
		_, got := endpoints(reply)
		assert.Equal(t, src, got)
	}
}

func TestChecksumWithIPOptions(t *testing.T) {
	// A 24-byte IPv4 header (one NOP-padded option word) before UDP.
	base := udpPkt(inside1, remote1)
	pkt := make([]byte, len(base)+4)
	copy(pkt, base[:20])
	pkt[0] = 0x46
	pkt[20], pkt[21], pkt[22], pkt[23] = 1, 1, 1, 0 // NOP NOP NOP EOL
	copy(pkt[24:], base[20:])
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	finish(pkt, false)
	n := newNAT(t, Config{})
	res := process(t, n, t0, pkt, FromInside)
	require.Equal(t, Forward, res.Verdict, res.Reason)
	src, dst := endpoints(pkt)
	assert.Equal(t, ext1, src)
	assert.Equal(t, remote1, dst)
}
