package fabric

import (
	"encoding/binary"
	"fmt"
	"net"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/latticelab/lattice/internal/inet"
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

const (
	ipv4MinHeaderLen = header.IPv4MinimumSize
	protoICMP        = uint8(header.ICMPv4ProtocolNumber)
	protoTCP         = uint8(header.TCPProtocolNumber)
	protoUDP         = uint8(header.UDPProtocolNumber)
)

// checkIPv4 validates the IPv4 header of p and returns the packet trimmed to
// its total length. Routers call it on every packet, so it neither allocates
// on success nor trusts any length field.
func checkIPv4(p []byte) ([]byte, error) {
	if len(p) < ipv4MinHeaderLen {
		return nil, fmt.Errorf("malformed: %d-byte packet is shorter than an IPv4 header", len(p))
	}
	if v := header.IPVersion(p); v != header.IPv4Version {
		return nil, fmt.Errorf("malformed: ip version %d", v)
	}
	ip := header.IPv4(p)
	ihl := int(ip.HeaderLength())
	if ihl < ipv4MinHeaderLen {
		return nil, fmt.Errorf("malformed: ipv4 header length %d", ihl)
	}
	total := int(ip.TotalLength())
	if total < ihl || total > len(p) {
		return nil, fmt.Errorf("malformed: ipv4 total length %d with %d-byte header in %d bytes", total, ihl, len(p))
	}
	if !ip.IsChecksumValid() {
		return nil, fmt.Errorf("malformed: bad ipv4 header checksum")
	}
	return p[:total], nil
}

// decTTL decrements the TTL of a valid IPv4 header, fixing its checksum.
func decTTL(p []byte) {
	ip := header.IPv4(p)
	// The TTL shares its 16-bit word with the protocol number.
	const ttlWord = 8
	old := binary.BigEndian.Uint16(p[ttlWord:])
	ip.SetTTL(ip.TTL() - 1)
	ip.SetChecksum(inet.Update(ip.Checksum(), old, binary.BigEndian.Uint16(p[ttlWord:])))
}
