// Package inet is the Internet checksum arithmetic (RFC 1071, RFC 1624)
// that the lab's routers and NAT and the pod netstack share, on gVisor's
// checksum package: the pseudo-header sum, the IPv4 header checksum, and
// incremental updates for rewriting a header in place. Parsing is left to
// gVisor's header views (header.IPv4, header.UDP, header.TCP,
// header.ICMPv4); nothing here allocates, as packet paths call it per
// packet.
package inet

import (
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// PseudoHeaderSum is the ones' complement sum of the TCP or UDP
// pseudo-header (RFC 9293 section 3.1, RFC 768, RFC 8200 section 8.1):
// addresses src and dst (4 bytes each for IPv4, 16 for IPv6), the
// transport protocol number and length, the transport header and payload
// included.
func PseudoHeaderSum(proto uint8, src, dst []byte, length int) uint16 {
	s := checksum.Checksum(src, 0)
	s = checksum.Checksum(dst, s)
	s = checksum.Combine(s, uint16(proto))
	return checksum.Combine(s, uint16(length))
}

// SetIPv4Checksum computes the checksum of IPv4 header h from scratch and
// stores it.
func SetIPv4Checksum(h header.IPv4) {
	h.SetChecksum(0)
	h.SetChecksum(^h.CalculateChecksum())
}
