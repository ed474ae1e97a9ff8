// Package inet is the Internet checksum arithmetic (RFC 1071, RFC 1624)
// that the lab's routers and NAT and the pod netstack share, on gVisor's
// checksum package: the pseudo-header sum, the IPv4 header checksum, and
// incremental updates for rewriting a header in place, and where a SYN's
// MSS option is, for clamping it, the largest IPv4 datagram, for
// reassembly, and the IPv4 fragmenter the node and the lab's routers
// share. Other parsing is left to gVisor's header views (header.IPv4,
// header.UDP, header.TCP, header.ICMPv4); nothing here allocates but the
// fragments FragmentIPv4 returns, as packet paths call it per packet.
package inet

import (
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// MaxIPv4Datagram is the largest IPv4 datagram, header included (RFC 791:
// the total length field is 16 bits). A fragment whose data would end past
// it cannot be split or reassembled: its offsets would wrap.
const MaxIPv4Datagram = 0xffff

// PseudoHeaderSum is the ones' complement sum of the TCP or UDP
// pseudo-header (RFC 9293 section 3.1, RFC 768, RFC 8200 section 8.1) of IP
// packet ip, IPv4 or IPv6 by its version: its source and destination
// addresses, the transport protocol number, and length, the bytes of
// transport header and payload. With length 0 it is the part a segmenter
// can reuse, adding each segment's length with checksum.Combine.
func PseudoHeaderSum(ip []byte, proto uint8, length int) uint16 {
	// The two addresses sit next to each other in both headers.
	addrs := ip[12:20]
	if header.IPVersion(ip) == header.IPv6Version {
		addrs = ip[8:40]
	}
	s := checksum.Combine(checksum.Checksum(addrs, 0), uint16(proto))
	return checksum.Combine(s, uint16(length))
}

// SetIPv4Checksum computes the checksum of IPv4 header h from scratch and
// stores it.
func SetIPv4Checksum(h header.IPv4) {
	h.SetChecksum(0)
	h.SetChecksum(^h.CalculateChecksum())
}

// Checksum is the Internet checksum (RFC 1071) of b: the value to store in
// a header whose checksum field in b is zero.
func Checksum(b []byte) uint16 {
	return ^checksum.Checksum(b, 0)
}

// MSSOption is the offset in TCP header tcp of its MSS option's 2-byte
// value (RFC 9293 section 3.2), or -1: no MSS option, or options that end
// or go malformed before one. Options past the end of tcp are not read.
func MSSOption(tcp []byte) int {
	if len(tcp) < header.TCPMinimumSize {
		return -1
	}
	end := min(int(tcp[12]>>4)*4, len(tcp))
	for i := header.TCPMinimumSize; i < end; {
		switch tcp[i] {
		case header.TCPOptionEOL:
			return -1
		case header.TCPOptionNOP:
			i++
			continue
		}
		if i+1 >= end {
			return -1
		}
		l := int(tcp[i+1])
		if l < 2 || i+l > end {
			return -1
		}
		if tcp[i] == header.TCPOptionMSS && l == header.TCPOptionMSSLength {
			return i + 2
		}
		i += l
	}
	return -1
}
