package fabric

import (
	"encoding/binary"
	"fmt"
	"net"
)

// Every frame in the fabric carries a 14-byte Ethernet II header. The fabric
// never speaks ARP: it knows which interface owns each address and writes the
// next hop's MAC directly, like a static neighbour table. The header is what
// lets a segment deliver a packet addressed to a far host to the gateway that
// should forward it, and it makes captures read like any LAN capture.
const (
	ethHeaderLen  = 14
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
)

// mac is a locally administered unicast address that encodes where the
// interface sits: 02:4c:NN:NN:PP:PP with NN the network index and PP the
// port index within that network, so a segment switches by indexing a slice.
type mac [6]byte

func makeMAC(network, port uint16) mac {
	var m mac
	m[0], m[1] = 0x02, 0x4c
	binary.BigEndian.PutUint16(m[2:4], network)
	binary.BigEndian.PutUint16(m[4:6], port)
	return m
}

func (m mac) String() string { return net.HardwareAddr(m[:]).String() }

// writeEth fills the link header of frame f.
func writeEth(f []byte, dst, src mac, etherType uint16) {
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
	binary.BigEndian.PutUint16(f[12:14], etherType)
}

func etherTypeFor(ipPacket []byte) (uint16, error) {
	if len(ipPacket) == 0 {
		return 0, fmt.Errorf("empty packet")
	}
	switch ipPacket[0] >> 4 {
	case 4:
		return etherTypeIPv4, nil
	case 6:
		return etherTypeIPv6, nil
	}
	return 0, fmt.Errorf("ip version %d", ipPacket[0]>>4)
}

const (
	ipv4MinHeaderLen = 20
	protoICMP        = 1
	protoTCP         = 6
	protoUDP         = 17
)

// checkIPv4 validates the IPv4 header of p and returns the packet trimmed to
// its total length. Routers call it on every packet, so it neither allocates
// on success nor trusts any length field.
func checkIPv4(p []byte) ([]byte, error) {
	if len(p) < ipv4MinHeaderLen {
		return nil, fmt.Errorf("malformed: %d-byte packet is shorter than an IPv4 header", len(p))
	}
	if p[0]>>4 != 4 {
		return nil, fmt.Errorf("malformed: ip version %d", p[0]>>4)
	}
	ihl := int(p[0]&0x0f) * 4
	if ihl < ipv4MinHeaderLen {
		return nil, fmt.Errorf("malformed: ipv4 header length %d", ihl)
	}
	total := int(binary.BigEndian.Uint16(p[2:4]))
	if total < ihl || total > len(p) {
		return nil, fmt.Errorf("malformed: ipv4 total length %d with %d-byte header in %d bytes", total, ihl, len(p))
	}
	if onesSum(p[:ihl]) != 0xffff {
		return nil, fmt.Errorf("malformed: bad ipv4 header checksum")
	}
	return p[:total], nil
}

// onesSum is the 16-bit one's complement sum of b (odd length padded with 0).
func onesSum(b []byte) uint16 {
	var s uint32
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// csumUpdate returns checksum c adjusted for a 16-bit word changing from old
// to new (RFC 1624, eqn. 3).
func csumUpdate(c, old, new uint16) uint16 {
	s := uint32(^c) + uint32(^old) + uint32(new)
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// decTTL decrements the TTL of a valid IPv4 header, fixing its checksum.
func decTTL(p []byte) {
	old := binary.BigEndian.Uint16(p[8:10])
	p[8]--
	c := csumUpdate(binary.BigEndian.Uint16(p[10:12]), old, binary.BigEndian.Uint16(p[8:10]))
	binary.BigEndian.PutUint16(p[10:12], c)
}

// setIPv4Checksum recomputes the header checksum from scratch.
func setIPv4Checksum(p []byte) {
	ihl := int(p[0]&0x0f) * 4
	p[10], p[11] = 0, 0
	binary.BigEndian.PutUint16(p[10:12], ^onesSum(p[:ihl]))
}
