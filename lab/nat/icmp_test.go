package nat

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var router = netip.MustParseAddr("192.0.2.254") // a router on the path

func TestICMPEcho(t *testing.T) {
	n := newNAT(t, Config{Filtering: AddressDependent, PortAllocation: Sequential, PortMin: 100, PortMax: 200})
	host := netip.MustParseAddr("192.168.1.2")
	req := icmpEcho(icmpEchoRequest, host, remote1.Addr(), 7)
	res := process(t, n, t0, req, FromInside)
	require.Equal(t, Forward, res.Verdict, res.Reason)
	assert.Equal(t, "icmp 192.168.1.2 id 7 → 203.0.113.10 id 100 (new mapping)", res.Reason)
	src, _ := endpoints(req)
	assert.Equal(t, ap("203.0.113.10:100"), src)

	// Another host using the same identifier gets another one.
	req2 := icmpEcho(icmpEchoRequest, netip.MustParseAddr("192.168.1.3"), remote1.Addr(), 7)
	require.Equal(t, Forward, process(t, n, t0, req2, FromInside).Verdict)
	src2, _ := endpoints(req2)
	assert.Equal(t, uint16(101), src2.Port())

	reply := icmpEcho(icmpEchoReply, remote1.Addr(), public, 100)
	res = process(t, n, t0, reply, FromOutside)
	require.Equal(t, Forward, res.Verdict, res.Reason)
	_, dst := endpoints(reply)
	assert.Equal(t, netip.AddrPortFrom(host, 7), dst)

	res = process(t, n, t0, icmpEcho(icmpEchoReply, netip.MustParseAddr("192.0.2.1"), public, 100), FromOutside)
	assert.Equal(t, Drop, res.Verdict)
	assert.Equal(t, "dropped by address-dependent filtering: 192.168.1.2:7 has not sent to 192.0.2.1 (icmp echo-reply 192.0.2.1 → 203.0.113.10 id 100)", res.Reason)

	mappings := n.Mappings(t0)
	require.Len(t, mappings, 2)
	assert.Equal(t, MappingInfo{
		Proto:      ICMP,
		Inside:     netip.AddrPortFrom(host, 7),
		External:   ap("203.0.113.10:100"),
		Peers:      []netip.AddrPort{netip.AddrPortFrom(remote1.Addr(), 0)},
		Created:    t0,
		LastActive: t0,
		Expires:    t0.Add(60 * time.Second),
	}, mappings[0])
}

func TestICMPUnsupported(t *testing.T) {
	host := netip.MustParseAddr("192.168.1.2")
	withType := func(pkt []byte, typ uint8) []byte {
		pkt[20] = typ
		return finish(pkt, false)
	}
	tests := []struct {
		name string
		pkt  []byte
		dir  Direction
		want string
	}{
		{"inbound echo request", icmpEcho(icmpEchoRequest, remote1.Addr(), public, 1), FromOutside,
			"unsupported: inbound icmp echo-request 198.51.100.7 id 1 → 203.0.113.10 (answering pings to the public address is the router's job)"},
		{"outbound echo reply", icmpEcho(icmpEchoReply, host, remote1.Addr(), 1), FromInside,
			"unsupported: outbound icmp echo-reply 192.168.1.2 → 198.51.100.7 id 1 (inbound pings are not forwarded)"},
		{"outbound timestamp", withType(icmpEcho(icmpEchoRequest, host, remote1.Addr(), 1), 13), FromInside,
			"unsupported: outbound icmp type 13 192.168.1.2 → 198.51.100.7"},
		{"inbound redirect", withType(icmpEcho(icmpEchoRequest, remote1.Addr(), public, 1), 5), FromOutside,
			"unsupported: inbound icmp type 5 198.51.100.7 → 203.0.113.10"},
		{"hairpinned ping", icmpEcho(icmpEchoRequest, host, public, 1), FromInside,
			"unsupported: hairpinned icmp echo-request 192.168.1.2 id 1 → 203.0.113.10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNAT(t, Config{Hairpin: true})
			res := process(t, n, t0, tt.pkt, tt.dir)
			assert.Equal(t, Drop, res.Verdict)
			assert.Equal(t, tt.want, res.Reason)
			assert.Equal(t, uint64(1), n.Stats().DroppedUnsupported)
		})
	}
}

func TestICMPErrorInbound(t *testing.T) {
	tests := []struct {
		name string
		out  func() []byte // the packet that provokes the error
	}{
		{"udp", func() []byte { return udpPkt(inside1, remote1) }},
		{"udp without checksum", func() []byte { return udpNoCsum(inside1, remote1) }},
		{"tcp", func() []byte { return tcpPkt(inside1, remote1, tcpSYN) }},
		{"echo", func() []byte { return icmpEcho(icmpEchoRequest, inside1.Addr(), remote1.Addr(), inside1.Port()) }},
	}
	for _, tt := range tests {
		for _, typ := range []uint8{icmpUnreachable, icmpTimeExceeded, icmpParamProblem} {
			t.Run(tt.name, func(t *testing.T) {
				n := newNAT(t, Config{Filtering: AddressAndPortDependent, PortAllocation: Sequential})
				orig := tt.out()
				out := append([]byte(nil), orig...)
				require.Equal(t, Forward, process(t, n, t0, out, FromInside).Verdict)
				before := n.Mappings(t0)

				// A router on the path reports the translated packet.
				errPkt := icmpError(typ, router, public, out)
				res := process(t, n, t0.Add(time.Second), errPkt, FromOutside)
				require.Equal(t, Forward, res.Verdict, res.Reason)
				_, dst := endpoints(errPkt)
				assert.Equal(t, inside1.Addr(), dst.Addr())
				// The quote now reads as the original packet did.
				assert.Equal(t, orig[:20], restoreTTLAndChecksum(errPkt[28:48], orig[:20]), "quoted ip header")
				assert.Equal(t, orig[20:24], errPkt[48:52], "quoted ports or type/code")
				if tt.name != "tcp" {
					assert.Equal(t, orig[24:28], errPkt[52:56], "quoted udp length/checksum or echo id")
				}
				assert.Zero(t, fold(sum(errPkt[28:48], 0)), "quoted ip header checksum")
				assert.Equal(t, before, n.Mappings(t0.Add(time.Second)), "errors must not refresh mappings")
			})
		}
	}
}

// restoreTTLAndChecksum returns quote with orig's TTL and checksum: the
// router may have decremented TTL, so only the other fields are compared.
func restoreTTLAndChecksum(quote, orig []byte) []byte {
	q := append([]byte(nil), quote...)
	q[8] = orig[8]
	copy(q[10:12], orig[10:12])
	return q
}

func TestICMPErrorInboundRefused(t *testing.T) {
	n := newNAT(t, Config{Filtering: AddressAndPortDependent})
	out := udpPkt(inside1, remote1)
	require.Equal(t, Forward, process(t, n, t0, out, FromInside).Verdict)

	forged := append([]byte(nil), out...)
	binary.BigEndian.PutUint16(forged[22:], 9999) // a destination never sent to
	forgedOther := append([]byte(nil), out...)
	binary.BigEndian.PutUint16(forgedOther[20:], 6000) // an external port with no mapping
	short := icmpError(icmpUnreachable, router, public, out)[:20+8+20+4]
	binary.BigEndian.PutUint16(short[2:], uint16(len(short)))
	finish(short, false)

	tests := []struct {
		name string
		pkt  []byte
		want string
	}{
		{"quote to a remote never sent to", icmpError(icmpUnreachable, router, public, finish(forged, false)),
			"dropped by address-and-port-dependent filtering: 192.168.1.2:5000 has not sent to 198.51.100.7 (icmp type 3 192.0.2.254 → 203.0.113.10 about udp 203.0.113.10:5000 → 198.51.100.7:9999)"},
		{"no mapping", icmpError(icmpUnreachable, router, public, finish(forgedOther, false)),
			"dropped by address-and-port-dependent filtering: no mapping for icmp type 3 192.0.2.254 → 203.0.113.10 about udp 203.0.113.10:6000 → 198.51.100.7:3478"},
		{"quote not from us", icmpError(icmpUnreachable, router, public, udpPkt(ap("192.0.2.9:5000"), remote1)),
			"dropped: icmp type 3 192.0.2.254 → 203.0.113.10 about udp 192.0.2.9:5000 → 198.51.100.7:3478 does not concern the public address 203.0.113.10"},
		{"truncated quote", short,
			"malformed: icmp type 3 192.0.2.254 → 203.0.113.10 quotes a truncated or non-IPv4 packet (24 bytes)"},
		{"quote of another protocol", icmpError(icmpUnreachable, router, public, withProto(out, 47)),
			"unsupported: icmp type 3 192.0.2.254 → 203.0.113.10 quotes ip protocol 47"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := process(t, n, t0, tt.pkt, FromOutside)
			assert.Equal(t, Drop, res.Verdict)
			assert.Equal(t, tt.want, res.Reason)
		})
	}
}

func withProto(pkt []byte, proto uint8) []byte {
	p := append([]byte(nil), pkt...)
	p[9] = proto
	return finish(p, false)
}

func TestICMPErrorOutbound(t *testing.T) {
	// A peer reaches our host through its mapping; the host answers with
	// port unreachable, which must leave from the NAT and quote the packet
	// as the peer sent it.
	n := newNAT(t, Config{PortAllocation: Sequential, PortMin: 40000, PortMax: 40010})
	ext, _ := sendOut(t, n, t0, inside1, remote1)
	in := udpPkt(remote1, ext)
	orig := append([]byte(nil), in...)
	require.Equal(t, Forward, process(t, n, t0, in, FromInside^1).Verdict)

	errPkt := icmpError(icmpUnreachable, inside1.Addr(), remote1.Addr(), in)
	res := process(t, n, t0, errPkt, FromInside)
	require.Equal(t, Forward, res.Verdict, res.Reason)
	src, dst := endpoints(errPkt)
	assert.Equal(t, public, src.Addr())
	assert.Equal(t, remote1.Addr(), dst.Addr())
	assert.Equal(t, orig[:28], errPkt[28:56], "the quote reads as the packet the peer sent")

	// An error about a flow the NAT does not know is dropped.
	stray := icmpError(icmpUnreachable, inside1.Addr(), remote1.Addr(), udpPkt(ap("192.0.2.1:1"), ap("192.168.1.2:6000")))
	res = process(t, n, t0, stray, FromInside)
	assert.Equal(t, Drop, res.Verdict)
	assert.Equal(t, "dropped: no mapping for icmp type 3 192.168.1.2 → 198.51.100.7 about udp 192.0.2.1:1 → 192.168.1.2:6000", res.Reason)
}
