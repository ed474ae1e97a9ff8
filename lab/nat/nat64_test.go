package nat

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

var (
	phone  = ap("[2001:db8:2::2]:5000")
	phone2 = ap("[2001:db8:2::3]:5000")
	srv4   = ap("198.51.100.7:7")
	srv64  = ap("[64:ff9b::c633:6407]:7") // 198.51.100.7 under the well-known prefix
)

// ipv6Pkt builds an IPv6 packet around l4 with its transport checksum
// computed by gVisor (ICMPv6 included).
func ipv6Pkt(next uint8, src, dst netip.Addr, l4 []byte) []byte {
	pkt := make([]byte, header.IPv6MinimumSize+len(l4))
	header.IPv6(pkt).Encode(&header.IPv6Fields{
		PayloadLength: uint16(len(l4)), TransportProtocol: tcpip.TransportProtocolNumber(next), HopLimit: 64,
		SrcAddr: tcpip.AddrFrom16(src.As16()), DstAddr: tcpip.AddrFrom16(dst.As16()),
	})
	t := pkt[header.IPv6MinimumSize:]
	copy(t, l4)
	off := map[uint8]int{ipProtoTCP: 16, ipProtoUDP: 6, ipProtoICMPv6: 2}[next]
	binary.BigEndian.PutUint16(t[off:], 0)
	xsum := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(next), tcpip.AddrFrom16(src.As16()), tcpip.AddrFrom16(dst.As16()), uint16(len(t)))
	binary.BigEndian.PutUint16(t[off:], ^checksum.Checksum(t, xsum))
	return pkt
}

func udp64(src, dst netip.AddrPort, payload string) []byte {
	l4 := make([]byte, 8+len(payload))
	header.UDP(l4).Encode(&header.UDPFields{SrcPort: src.Port(), DstPort: dst.Port(), Length: uint16(len(l4))})
	copy(l4[8:], payload)
	return ipv6Pkt(ipProtoUDP, src.Addr(), dst.Addr(), l4)
}

func tcp64(src, dst netip.AddrPort, flags uint8) []byte {
	l4 := make([]byte, 20+3)
	header.TCP(l4).Encode(&header.TCPFields{SrcPort: src.Port(), DstPort: dst.Port(), SeqNum: 1000, DataOffset: 20, Flags: header.TCPFlags(flags), WindowSize: 65535})
	copy(l4[20:], "abc")
	return ipv6Pkt(ipProtoTCP, src.Addr(), dst.Addr(), l4)
}

func echo6(typ uint8, src, dst netip.Addr, id uint16) []byte {
	l4 := make([]byte, 8+4)
	l4[0] = typ
	binary.BigEndian.PutUint16(l4[4:], id)
	binary.BigEndian.PutUint16(l4[6:], 1)
	copy(l4[8:], "ping")
	return ipv6Pkt(ipProtoICMPv6, src, dst, l4)
}

// gvisorValid4 checks an IPv4 packet's checksums with gVisor's parsers.
func gvisorValid4(t *testing.T, pkt []byte) {
	t.Helper()
	ip := header.IPv4(pkt)
	require.True(t, ip.IsValid(len(pkt)), "ipv4 header")
	assert.True(t, ip.IsChecksumValid(), "ipv4 header checksum")
	src, dst, l4 := ip.SourceAddress(), ip.DestinationAddress(), ip.Payload()
	switch ip.Protocol() {
	case ipProtoUDP:
		u := header.UDP(l4)
		assert.True(t, u.IsChecksumValid(src, dst, checksum.Checksum(u.Payload(), 0)), "udp checksum")
	case ipProtoTCP:
		h := header.TCP(l4)
		assert.True(t, h.IsChecksumValid(src, dst, checksum.Checksum(h.Payload(), 0), uint16(len(h.Payload()))), "tcp checksum")
	case ipProtoICMP:
		assert.Equal(t, uint16(0xffff), checksum.Checksum(l4, 0), "icmp checksum")
	}
}

// gvisorValid6 checks an IPv6 packet's transport checksum with gVisor's
// parsers.
func gvisorValid6(t *testing.T, pkt []byte) {
	t.Helper()
	ip := header.IPv6(pkt)
	require.True(t, ip.IsValid(len(pkt)), "ipv6 header")
	src, dst, l4 := ip.SourceAddress(), ip.DestinationAddress(), ip.Payload()
	switch tcpip.TransportProtocolNumber(ip.NextHeader()) {
	case header.UDPProtocolNumber:
		u := header.UDP(l4)
		assert.True(t, u.IsChecksumValid(src, dst, checksum.Checksum(u.Payload(), 0)), "udp checksum")
	case header.TCPProtocolNumber:
		h := header.TCP(l4)
		assert.True(t, h.IsChecksumValid(src, dst, checksum.Checksum(h.Payload(), 0), uint16(len(h.Payload()))), "tcp checksum")
	case header.ICMPv6ProtocolNumber:
		h := header.ICMPv6(l4)
		want := header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: h[:header.ICMPv6MinimumSize], Src: src, Dst: dst,
			PayloadCsum: checksum.Checksum(h[header.ICMPv6MinimumSize:], 0), PayloadLen: len(h) - header.ICMPv6MinimumSize})
		assert.Equal(t, want, h.Checksum(), "icmpv6 checksum")
	default:
		t.Fatalf("unexpected next header %d", tcpip.TransportProtocolNumber(ip.NextHeader()))
	}
}

func newNAT64(t *testing.T, cfg NAT64Config) *NAT64 {
	t.Helper()
	if !cfg.Public.IsValid() {
		cfg.Public = public
	}
	x, err := NewNAT64(cfg)
	require.NoError(t, err)
	return x
}

// out64 translates an IPv6 packet from inside; on Forward it checks the
// IPv4 result with gVisor and returns its endpoints.
func out64(t *testing.T, x *NAT64, now time.Time, pkt []byte) ([]byte, Result) {
	t.Helper()
	orig := append([]byte(nil), pkt...)
	b, res := x.Translate(now, make([]byte, 0, len(pkt)+40), pkt, FromInside)
	assert.Equal(t, orig, pkt, "input modified")
	if res.Verdict == Forward {
		gvisorValid4(t, b)
	} else {
		assert.Nil(t, b)
		assert.NotEmpty(t, res.Reason)
	}
	return b, res
}

func in64(t *testing.T, x *NAT64, now time.Time, pkt []byte) ([]byte, Result) {
	t.Helper()
	b, res := x.Translate(now, nil, pkt, FromOutside)
	if res.Verdict == Forward {
		gvisorValid6(t, b)
	} else {
		assert.Nil(t, b)
		assert.NotEmpty(t, res.Reason)
	}
	return b, res
}

func ends6(pkt []byte) (src, dst netip.AddrPort) {
	ip := header.IPv6(pkt)
	s, d := netip.AddrFrom16(ip.SourceAddress().As16()), netip.AddrFrom16(ip.DestinationAddress().As16())
	l4 := pkt[header.IPv6MinimumSize:] // a quote may be cut short of its payload length
	var sp, dp uint16
	if tcpip.TransportProtocolNumber(ip.NextHeader()) == header.ICMPv6ProtocolNumber {
		sp = binary.BigEndian.Uint16(l4[4:])
		dp = sp
	} else {
		sp, dp = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
	}
	return netip.AddrPortFrom(s, sp), netip.AddrPortFrom(d, dp)
}

func TestNAT64UDP(t *testing.T) {
	x := newNAT64(t, NAT64Config{})
	b, res := out64(t, x, t0, udp64(phone, srv64, "hello"))
	require.Equal(t, Forward, res.Verdict, res.Reason)
	assert.Contains(t, res.Reason, "new mapping")
	src, dst := endpoints(b)
	assert.Equal(t, public, src.Addr())
	assert.Equal(t, srv4, dst)
	assert.Equal(t, uint8(64), header.IPv4(b).TTL(), "hop limit copied; the router decrements it")
	assert.Equal(t, "hello", string(header.UDP(header.IPv4(b).Payload()).Payload()))
	assert.Equal(t, uint8(0), header.IPv4(b).Flags()&header.IPv4FlagDontFragment, "small packets may be fragmented (RFC 7915 section 5.1)")

	reply, res := in64(t, x, t0.Add(time.Second), udpPkt(srv4, src))
	require.Equal(t, Forward, res.Verdict, res.Reason)
	rs, rd := ends6(reply)
	assert.Equal(t, srv64, rs, "the IPv4 server appears under the prefix")
	assert.Equal(t, phone, rd)
	assert.Equal(t, "hello", string(header.UDP(header.IPv6(reply).Payload()).Payload()))

	// Endpoint-independent mapping: the same external port to another
	// server; endpoint-independent filtering: any server may answer.
	b2, _ := out64(t, x, t0.Add(2*time.Second), udp64(phone, netip.AddrPortFrom(x.Embed(netip.MustParseAddr("192.0.2.9")), 53), "q"))
	s2, _ := endpoints(b2)
	assert.Equal(t, src, s2)
	_, res = in64(t, x, t0.Add(3*time.Second), udpPkt(ap("192.0.2.200:9"), src))
	assert.Equal(t, Forward, res.Verdict, res.Reason)

	// A second host gets its own mapping.
	b3, _ := out64(t, x, t0.Add(4*time.Second), udp64(phone2, srv64, "hi"))
	s3, _ := endpoints(b3)
	assert.NotEqual(t, src.Port(), s3.Port())
	r3, _ := in64(t, x, t0.Add(5*time.Second), udpPkt(srv4, s3))
	_, d3 := ends6(r3)
	assert.Equal(t, phone2, d3)
	assert.Len(t, x.Mappings(t0.Add(5*time.Second)), 2)

	// IPv4 UDP without a checksum gets one: IPv6 requires it.
	r4, res := in64(t, x, t0.Add(6*time.Second), udpNoCsum(srv4, src))
	require.Equal(t, Forward, res.Verdict, res.Reason)
	assert.NotZero(t, header.UDP(header.IPv6(r4).Payload()).Checksum())
}

func TestNAT64Inbound(t *testing.T) {
	x := newNAT64(t, NAT64Config{UDPTimeout: 30 * time.Second})
	_, res := in64(t, x, t0, udpPkt(srv4, ap("203.0.113.10:5000")))
	assert.Equal(t, Drop, res.Verdict, "unsolicited")
	assert.Contains(t, res.Reason, "no mapping")
	b, _ := out64(t, x, t0, udp64(phone, srv64, "x"))
	src, _ := endpoints(b)
	_, res = in64(t, x, t0, udpPkt(srv4, netip.AddrPortFrom(public, src.Port()+1)))
	assert.Equal(t, Drop, res.Verdict, "another port")
	_, res = in64(t, x, t0, udpPkt(srv4, netip.AddrPortFrom(netip.MustParseAddr("203.0.113.11"), src.Port())))
	assert.Equal(t, Drop, res.Verdict, "another address")
	_, res = in64(t, x, t0.Add(29*time.Second), udpPkt(srv4, src))
	assert.Equal(t, Forward, res.Verdict, "alive")
	_, res = in64(t, x, t0.Add(30*time.Second), udpPkt(srv4, src))
	assert.Equal(t, Drop, res.Verdict, "expired: inbound does not refresh")
	assert.Equal(t, uint64(1), x.Stats().Expired)
	_, res = in64(t, x, t0, tcpPkt(srv4, src, tcpSYN))
	assert.Equal(t, Drop, res.Verdict, "inbound SYN to no TCP mapping")
}

func TestNAT64TCP(t *testing.T) {
	x := newNAT64(t, NAT64Config{})
	_, res := out64(t, x, t0, tcp64(phone, srv64, tcpACK))
	assert.Equal(t, Drop, res.Verdict, "only a SYN opens a mapping")
	b, res := out64(t, x, t0, tcp64(phone, srv64, tcpSYN))
	require.Equal(t, Forward, res.Verdict, res.Reason)
	src, dst := endpoints(b)
	assert.Equal(t, srv4, dst)
	r, res := in64(t, x, t0, tcpPkt(srv4, src, tcpSYN|tcpACK))
	require.Equal(t, Forward, res.Verdict, res.Reason)
	_, rd := ends6(r)
	assert.Equal(t, phone, rd)
	m := x.Mappings(t0)
	require.Len(t, m, 1)
	assert.Equal(t, "established", m[0].TCPState)
	assert.Equal(t, t0.Add(DefaultTCPEstablishedTimeout), m[0].Expires)
}

func TestNAT64Echo(t *testing.T) {
	x := newNAT64(t, NAT64Config{})
	b, res := out64(t, x, t0, echo6(icmp6Echo, phone.Addr(), srv64.Addr(), 77))
	require.Equal(t, Forward, res.Verdict, res.Reason)
	ip := header.IPv4(b)
	assert.Equal(t, ipProtoICMP, ip.Protocol())
	assert.Equal(t, icmpEchoRequest, ip.Payload()[0])
	id := header.ICMPv4(ip.Payload()).Ident()
	r, res := in64(t, x, t0, icmpEcho(icmpEchoReply, srv4.Addr(), public, id))
	require.Equal(t, Forward, res.Verdict, res.Reason)
	assert.Equal(t, icmp6Reply, header.IPv6(r).Payload()[0])
	_, d := ends6(r)
	assert.Equal(t, netip.AddrPortFrom(phone.Addr(), 77), d)
	_, res = in64(t, x, t0, icmpEcho(icmpEchoRequest, srv4.Addr(), public, id))
	assert.Equal(t, Drop, res.Verdict, "inbound pings are the router's")
}

// TestNAT64TooBig: an IPv4 router's "fragmentation needed" about a
// translated packet reaches the IPv6 host as Packet Too Big with the MTU
// 20 bytes larger and the quote translated; the host's own Packet Too Big
// about an inbound packet leaves as "fragmentation needed", 20 smaller.
func TestNAT64TooBig(t *testing.T) {
	x := newNAT64(t, NAT64Config{})
	sent, _ := out64(t, x, t0, udp64(phone, srv64, "big"))
	src, _ := endpoints(sent)
	fn := icmpError(icmpUnreachable, netip.MustParseAddr("192.0.2.1"), public, sent)
	fn[20+1] = 4 // code: fragmentation needed
	binary.BigEndian.PutUint16(fn[20+6:], 1400)
	fn = finish(fn, false)
	r, res := in64(t, x, t0, fn)
	require.Equal(t, Forward, res.Verdict, res.Reason)
	icmp := header.ICMPv6(header.IPv6(r).Payload())
	assert.Equal(t, header.ICMPv6PacketTooBig, icmp.Type())
	assert.Equal(t, uint32(1420), icmp.MTU())
	rs, rd := ends6(r)
	assert.Equal(t, x.Embed(netip.MustParseAddr("192.0.2.1")), rs.Addr())
	assert.Equal(t, phone.Addr(), rd.Addr())
	qs, qd := ends6(icmp.Payload())
	assert.Equal(t, phone, qs, "the quote is the packet the host sent")
	assert.Equal(t, srv64, qd)

	// A port unreachable with a small MTU plateau still names at least 1280.
	binary.BigEndian.PutUint16(fn[20+6:], 576)
	r, _ = in64(t, x, t0, finish(fn, false))
	assert.Equal(t, uint32(1280), header.ICMPv6(header.IPv6(r).Payload()).MTU())

	in, _ := in64(t, x, t0, udpPkt(srv4, src))
	ptb := make([]byte, 8+len(in))
	ptb[0] = icmp6TooBig
	binary.BigEndian.PutUint32(ptb[4:], 1300)
	copy(ptb[8:], in)
	b, res := out64(t, x, t0, ipv6Pkt(ipProtoICMPv6, phone.Addr(), srv64.Addr(), ptb))
	require.Equal(t, Forward, res.Verdict, res.Reason)
	ip := header.IPv4(b)
	ic := header.ICMPv4(ip.Payload())
	assert.Equal(t, header.ICMPv4DstUnreachable, ic.Type())
	assert.Equal(t, header.ICMPv4FragmentationNeeded, ic.Code())
	assert.Equal(t, uint16(1280), ic.MTU())
	qs4, qd4 := endpoints(ic.Payload())
	assert.Equal(t, srv4, qs4)
	assert.Equal(t, src, qd4, "the quote is the packet the server sent")
	assert.True(t, header.IPv4(ic.Payload()).IsChecksumValid(), "quoted header checksum")
	q := header.IPv4(ic.Payload())
	u := header.UDP(q.Payload())
	assert.True(t, u.IsChecksumValid(q.SourceAddress(), q.DestinationAddress(), checksum.Checksum(u.Payload(), 0)), "quoted udp checksum")
}

func TestNAT64Drops(t *testing.T) {
	x := newNAT64(t, NAT64Config{MaxMappings: 1})
	frag := udp64(phone, srv64, "x")
	frag[6] = 44
	for _, tc := range []struct {
		name string
		pkt  []byte
		dir  Direction
		want string
	}{
		{"outside prefix", udp64(phone, ap("[2001:db8::1]:7"), "x"), FromInside, "is not in the nat64 prefix 64:ff9b::/96"},
		{"loopback embedded", udp64(phone, ap("[64:ff9b::7f00:1]:7"), "x"), FromInside, "64:ff9b::7f00:1 embeds 127.0.0.1, not a unicast IPv4 address"},
		{"ipv4 from inside", udpPkt(ap("10.0.0.1:1"), srv4), FromInside, "ip version 4 from the ipv6 side"},
		{"short", []byte{0x60, 0}, FromInside, "shorter than an ipv6 header"},
		{"fragment", frag, FromInside, "ipv6 fragments are not translated"},
		{"too big for ipv4", udp64(phone, srv64, strings.Repeat("x", 65535-8)), FromInside, "a 65535-byte ipv6 payload makes a 65555-byte ipv4 packet, more than 65535"},
		{"ipv6 from outside", udp64(phone, srv64, "x"), FromOutside, "ip version 6"},
		{"inbound echo request", icmpEcho(icmpEchoRequest, srv4.Addr(), public, 1), FromOutside, "unsupported: inbound icmp echo-request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, res := x.Translate(t0, nil, tc.pkt, tc.dir)
			assert.Nil(t, b)
			assert.Equal(t, Drop, res.Verdict)
			assert.Contains(t, res.Reason, tc.want)
		})
	}
	_, res := out64(t, x, t0, udp64(phone, srv64, "x"))
	require.Equal(t, Forward, res.Verdict)
	_, res = out64(t, x, t0, udp64(phone2, srv64, "x"))
	assert.Equal(t, Drop, res.Verdict)
	assert.Contains(t, res.Reason, "mapping table full (1 mappings)")
}

func TestNAT64Prefix(t *testing.T) {
	p := netip.MustParsePrefix("2001:db8:64::/96")
	x := newNAT64(t, NAT64Config{Prefix: p})
	b, res := out64(t, x, t0, udp64(phone, ap("[2001:db8:64::c633:6407]:7"), "x"))
	require.Equal(t, Forward, res.Verdict, res.Reason)
	_, dst := endpoints(b)
	assert.Equal(t, srv4, dst)
	_, res = out64(t, x, t0, udp64(phone, srv64, "x"))
	assert.Equal(t, Drop, res.Verdict, "the well-known prefix is not this one")

	for _, tc := range []struct {
		cfg  NAT64Config
		want string
	}{
		{NAT64Config{}, "nat: public address is required"},
		{NAT64Config{Public: public, Prefix: netip.MustParsePrefix("64:ff9b::/64")}, "nat: nat64 prefix 64:ff9b::/64 is not a /96"},
		{NAT64Config{Public: public, Prefix: netip.MustParsePrefix("10.0.0.0/8")}, "nat: nat64 prefix 10.0.0.0/8 is not an IPv6 prefix"},
		{NAT64Config{Public: public, Prefix: netip.MustParsePrefix("64:ff9b::1/96")}, "nat: nat64 prefix 64:ff9b::1/96 has host bits set"},
		{NAT64Config{Public: netip.MustParseAddr("2001:db8::1")}, "nat: public address 2001:db8::1 is not IPv4"},
	} {
		_, err := NewNAT64(tc.cfg)
		assert.ErrorIs(t, err, ErrInvalidConfig)
		assert.EqualError(t, err, tc.want)
	}
}

// BenchmarkNAT64 is BenchmarkProcess for the NAT64: one outbound (IPv6 to
// IPv4) and one inbound translation of an established UDP flow.
func BenchmarkNAT64(b *testing.B) {
	x, err := NewNAT64(NAT64Config{Public: public})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1000, 0)
	outPkt := udp64(phone, srv64, "hello")
	sent, res := x.Translate(now, nil, outPkt, FromInside)
	if res.Verdict != Forward {
		b.Fatal(res.Reason)
	}
	ext, _ := endpoints(sent)
	inPkt := udpPkt(srv4, ext)
	buf := make([]byte, 0, 2048)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, res := x.Translate(now, buf, outPkt, FromInside); res.Verdict != Forward {
			b.Fatal("outbound dropped")
		}
		if _, res := x.Translate(now, buf, inPkt, FromOutside); res.Verdict != Forward {
			b.Fatal("inbound dropped")
		}
	}
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "pps")
}

// TestNAT64DoesNotAllocate: translating an established flow allocates
// nothing when dst has room.
func TestNAT64DoesNotAllocate(t *testing.T) {
	x := newNAT64(t, NAT64Config{})
	outPkt := udp64(phone, srv64, "hello")
	sent, _ := out64(t, x, t0, outPkt)
	ext, _ := endpoints(sent)
	inPkt := udpPkt(srv4, ext)
	buf := make([]byte, 0, 2048)
	allocs := testing.AllocsPerRun(100, func() {
		x.Translate(t0, buf, outPkt, FromInside)
		x.Translate(t0, buf, inPkt, FromOutside)
	})
	assert.Zero(t, allocs)
}
