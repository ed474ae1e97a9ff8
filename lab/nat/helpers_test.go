package nat

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	public = netip.MustParseAddr("203.0.113.10")
	t0     = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// sum is a from-scratch one's-complement sum, independent of checksum.go.
func sum(b []byte, acc uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		acc += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		acc += uint32(b[len(b)-1]) << 8
	}
	return acc
}

func fold(acc uint32) uint16 {
	for acc > 0xffff {
		acc = acc&0xffff + acc>>16
	}
	return ^uint16(acc)
}

// pseudo is the TCP/UDP pseudo-header sum.
func pseudo(ip []byte, proto uint8, l4len int) uint32 {
	acc := sum(ip[12:20], 0)
	return acc + uint32(proto) + uint32(l4len)
}

// finish fills in the IPv4 header checksum and the transport checksum.
func finish(pkt []byte, udpZeroCsum bool) []byte {
	ihl := int(pkt[0]&0xf) * 4
	binary.BigEndian.PutUint16(pkt[10:], 0)
	binary.BigEndian.PutUint16(pkt[10:], fold(sum(pkt[:ihl], 0)))
	l4 := pkt[ihl:]
	switch pkt[9] {
	case ipProtoTCP:
		binary.BigEndian.PutUint16(l4[16:], 0)
		binary.BigEndian.PutUint16(l4[16:], fold(sum(l4, pseudo(pkt, ipProtoTCP, len(l4)))))
	case ipProtoUDP:
		binary.BigEndian.PutUint16(l4[6:], 0)
		if !udpZeroCsum {
			c := fold(sum(l4, pseudo(pkt, ipProtoUDP, len(l4))))
			if c == 0 {
				c = 0xffff
			}
			binary.BigEndian.PutUint16(l4[6:], c)
		}
	case ipProtoICMP:
		binary.BigEndian.PutUint16(l4[2:], 0)
		binary.BigEndian.PutUint16(l4[2:], fold(sum(l4, 0)))
	}
	return pkt
}

// ipv4 builds an IPv4 packet around l4 with correct checksums.
func ipv4(proto uint8, src, dst netip.Addr, l4 []byte) []byte {
	pkt := make([]byte, 20+len(l4))
	pkt[0] = 0x45
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	binary.BigEndian.PutUint16(pkt[4:], 0x1234) // ID
	pkt[6] = 0x40                               // DF
	pkt[8] = 64
	pkt[9] = proto
	s, d := src.As4(), dst.As4()
	copy(pkt[12:], s[:])
	copy(pkt[16:], d[:])
	copy(pkt[20:], l4)
	return finish(pkt, false)
}

func udpPkt(src, dst netip.AddrPort) []byte {
	l4 := make([]byte, 8+5)
	binary.BigEndian.PutUint16(l4[0:], src.Port())
	binary.BigEndian.PutUint16(l4[2:], dst.Port())
	binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	copy(l4[8:], "hello")
	return ipv4(ipProtoUDP, src.Addr(), dst.Addr(), l4)
}

func udpNoCsum(src, dst netip.AddrPort) []byte {
	return finish(udpPkt(src, dst), true)
}

func tcpPkt(src, dst netip.AddrPort, flags uint8) []byte {
	l4 := make([]byte, 20+3)
	binary.BigEndian.PutUint16(l4[0:], src.Port())
	binary.BigEndian.PutUint16(l4[2:], dst.Port())
	binary.BigEndian.PutUint32(l4[4:], 1000)
	l4[12] = 5 << 4
	l4[13] = flags
	binary.BigEndian.PutUint16(l4[14:], 65535)
	copy(l4[20:], "abc") // odd length exercises the pad byte
	return ipv4(ipProtoTCP, src.Addr(), dst.Addr(), l4)
}

func icmpEcho(typ uint8, src, dst netip.Addr, id uint16) []byte {
	l4 := make([]byte, 8+4)
	l4[0] = typ
	binary.BigEndian.PutUint16(l4[4:], id)
	binary.BigEndian.PutUint16(l4[6:], 1) // sequence
	copy(l4[8:], "ping")
	return ipv4(ipProtoICMP, src, dst, l4)
}

// icmpError builds an ICMP error of type typ from src to dst quoting the
// first 28 bytes of orig.
func icmpError(typ uint8, src, dst netip.Addr, orig []byte) []byte {
	n := min(len(orig), 28)
	l4 := make([]byte, 8+n)
	l4[0] = typ
	copy(l4[8:], orig[:n])
	return ipv4(ipProtoICMP, src, dst, l4)
}

// verifyChecksums asserts that every checksum of an IPv4 packet verifies
// from scratch.
func verifyChecksums(t *testing.T, pkt []byte) {
	t.Helper()
	ihl := int(pkt[0]&0xf) * 4
	assert.Zero(t, fold(sum(pkt[:ihl], 0)), "ipv4 header checksum")
	l4 := pkt[ihl:binary.BigEndian.Uint16(pkt[2:])]
	switch pkt[9] {
	case ipProtoTCP:
		assert.Zero(t, fold(sum(l4, pseudo(pkt, ipProtoTCP, len(l4)))), "tcp checksum")
	case ipProtoUDP:
		if binary.BigEndian.Uint16(l4[6:]) != 0 {
			assert.Zero(t, fold(sum(l4, pseudo(pkt, ipProtoUDP, len(l4)))), "udp checksum")
		}
	case ipProtoICMP:
		assert.Zero(t, fold(sum(l4, 0)), "icmp checksum")
	}
}

// endpoints reads a packet's source and destination straight from the bytes
// (the port is the echo identifier for ICMP echo, else 0 for ICMP).
func endpoints(pkt []byte) (src, dst netip.AddrPort) {
	ihl := int(pkt[0]&0xf) * 4
	s := netip.AddrFrom4([4]byte(pkt[12:16]))
	d := netip.AddrFrom4([4]byte(pkt[16:20]))
	var sp, dp uint16
	switch pkt[9] {
	case ipProtoTCP, ipProtoUDP:
		sp = binary.BigEndian.Uint16(pkt[ihl:])
		dp = binary.BigEndian.Uint16(pkt[ihl+2:])
	case ipProtoICMP:
		if t := pkt[ihl]; t == icmpEchoRequest || t == icmpEchoReply {
			sp = binary.BigEndian.Uint16(pkt[ihl+4:])
			dp = sp
		}
	}
	return netip.AddrPortFrom(s, sp), netip.AddrPortFrom(d, dp)
}

// newNAT builds a NAT, filling in Public.
func newNAT(t *testing.T, cfg Config) *NAT {
	t.Helper()
	if !cfg.Public.IsValid() {
		cfg.Public = public
	}
	n, err := New(cfg)
	require.NoError(t, err)
	return n
}

// process runs pkt through n and, when forwarded, checks its checksums.
// A dropped packet must come back unmodified.
func process(t *testing.T, n *NAT, now time.Time, pkt []byte, dir Direction) Result {
	t.Helper()
	orig := append([]byte(nil), pkt...)
	res := n.Process(now, pkt, dir)
	if res.Verdict == Forward {
		verifyChecksums(t, pkt)
	} else {
		assert.Equal(t, orig, pkt, "dropped packet was modified")
		assert.NotEmpty(t, res.Reason, "drop without a reason")
	}
	return res
}

// sendOut sends a UDP packet from inside and returns the external source it
// left with (zero if dropped).
func sendOut(t *testing.T, n *NAT, now time.Time, from, to netip.AddrPort) (netip.AddrPort, Result) {
	t.Helper()
	pkt := udpPkt(from, to)
	res := process(t, n, now, pkt, FromInside)
	if res.Verdict != Forward {
		return netip.AddrPort{}, res
	}
	src, dst := endpoints(pkt)
	require.Equal(t, to, dst, "destination must not change")
	return src, res
}

// sendIn sends a UDP packet from outside and returns the internal destination
// it was delivered to (zero if dropped).
func sendIn(t *testing.T, n *NAT, now time.Time, from, to netip.AddrPort) (netip.AddrPort, Result) {
	t.Helper()
	pkt := udpPkt(from, to)
	res := process(t, n, now, pkt, FromOutside)
	if res.Verdict != Forward {
		return netip.AddrPort{}, res
	}
	src, dst := endpoints(pkt)
	require.Equal(t, from, src, "source must not change")
	return dst, res
}
