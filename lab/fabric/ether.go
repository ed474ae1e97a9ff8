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
