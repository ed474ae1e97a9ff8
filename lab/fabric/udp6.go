package fabric

import (
	"encoding/binary"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// IPv6 for the fabric's own UDP sockets (udp.go): the same path with a
// 40-byte header. A host never fragments what it sends over IPv6 (RFC 8200
// section 5: the source fragments, and the lab's hosts keep datagrams
// within the link MTU instead, failing with EMSGSIZE), and extension
// headers are left to gVisor.

const (
	ipv6HeaderLen = header.IPv6MinimumSize
	protoICMPv6   = uint8(header.ICMPv6ProtocolNumber)
)

// build6 writes the IPv6 and UDP headers and the payload into f after its
// Ethernet header.
func (u *udpStack) build6(f []byte, src, dst netip.AddrPort, payload []byte) {
	ip := f[ethHeaderLen : ethHeaderLen+ipv6HeaderLen+udpHeaderLen+len(payload)]
	binary.BigEndian.PutUint32(ip[0:4], 6<<28) // version 6, traffic class 0, flow label 0
	binary.BigEndian.PutUint16(ip[4:6], uint16(udpHeaderLen+len(payload)))
	ip[6], ip[7] = protoUDP, defaultTTL
	s16, d16 := src.Addr().As16(), dst.Addr().As16()
	copy(ip[8:24], s16[:])
	copy(ip[24:40], d16[:])
	writeUDP(ip, ip[ipv6HeaderLen:], src, dst, payload)
}

// udp6Packet checks that p is an IPv6 packet whose next header is UDP and
// returns it trimmed to its payload length; ok is false otherwise (other
// protocols, extension headers, bad lengths).
func udp6Packet(p []byte) (ip []byte, ok bool) {
	if len(p) < ipv6HeaderLen+udpHeaderLen || p[0]>>4 != 6 || p[6] != protoUDP {
		return nil, false
	}
	n := int(binary.BigEndian.Uint16(p[4:6]))
	if n < udpHeaderLen || ipv6HeaderLen+n > len(p) {
		return nil, false
	}
	return p[:ipv6HeaderLen+n], true
}
