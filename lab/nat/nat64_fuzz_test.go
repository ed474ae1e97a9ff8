package nat

import (
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// FuzzNAT64 feeds any bytes to both of the translator's entry points: it
// must never panic, and what it forwards must parse in the other family
// with a valid IPv4 header checksum.
func FuzzNAT64(f *testing.F) {
	out := udp64(phone, srv64, "hello")
	f.Add(out, false)
	f.Add(tcp64(phone, srv64, tcpSYN), false)
	f.Add(echo6(icmp6Echo, phone.Addr(), srv64.Addr(), 7), false)
	f.Add(udpPkt(srv4, ap("203.0.113.10:5000")), true)
	f.Add(icmpEcho(icmpEchoReply, srv4.Addr(), public, 5000), true)
	f.Add(icmpError(icmpUnreachable, srv4.Addr(), public, udpPkt(ap("203.0.113.10:5000"), srv4)), true)
	ptb := make([]byte, 8+48)
	ptb[0] = icmp6TooBig
	copy(ptb[8:], udp64(srv64, phone, "x"))
	f.Add(ipv6Pkt(ipProtoICMPv6, phone.Addr(), srv64.Addr(), ptb), false)
	f.Add([]byte{0x60}, false)

	f.Fuzz(func(t *testing.T, pkt []byte, inbound bool) {
		x, err := NewNAT64(NAT64Config{Public: public, PortMin: 5000, PortMax: 5000})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1000, 0)
		// Prime mappings (the one port, 5000) so inbound packets reach the
		// translation paths.
		x.Translate(now, nil, udp64(phone, srv64, "x"), FromInside)
		x.Translate(now, nil, echo6(icmp6Echo, phone.Addr(), srv64.Addr(), 7), FromInside)
		dir := FromInside
		if inbound {
			dir = FromOutside
		}
		orig := string(pkt)
		b, res := x.Translate(now, nil, pkt, dir)
		if string(pkt) != orig {
			t.Fatal("input modified")
		}
		if res.Verdict == Drop {
			if b != nil || res.Reason == "" {
				t.Fatalf("drop with output %x or no reason", b)
			}
			return
		}
		if inbound {
			if len(b) < header.IPv6MinimumSize || !header.IPv6(b).IsValid(len(b)) {
				t.Fatalf("forwarded an invalid ipv6 packet %x", b)
			}
			return
		}
		if !header.IPv4(b).IsValid(len(b)) || !header.IPv4(b).IsChecksumValid() {
			t.Fatalf("forwarded an invalid ipv4 packet %x", b)
		}
	})
}
