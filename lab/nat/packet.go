package nat

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// IP protocol numbers, TCP flags and ICMP types the NAT looks at.
const (
	ipProtoICMP = 1
	ipProtoTCP  = 6
	ipProtoUDP  = 17

	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10

	icmpEchoReply    = 0
	icmpUnreachable  = 3
	icmpEchoRequest  = 8
	icmpTimeExceeded = 11
	icmpParamProblem = 12
)

// packet is a parsed IPv4 packet with a TCP, UDP or ICMP header. Offsets
// index b, which parse trims to the IPv4 total length (link-layer padding is
// left alone).
type packet struct {
	b        []byte
	l4       int // offset of the transport header
	proto    Proto
	src, dst netip.Addr
	// sport and dport are the TCP/UDP ports. For ICMP they hold the echo
	// identifier (both of them), for other ICMP types zero.
	sport, dport uint16
	tcpFlags     uint8
	icmpType     uint8
}

func (p *packet) srcEP() netip.AddrPort { return netip.AddrPortFrom(p.src, p.sport) }
func (p *packet) dstEP() netip.AddrPort { return netip.AddrPortFrom(p.dst, p.dport) }

// isEcho reports whether the packet is an ICMP echo request or reply.
func (p *packet) isEcho() bool {
	return p.proto == ICMP && (p.icmpType == icmpEchoRequest || p.icmpType == icmpEchoReply)
}

// parse fills p from b. It does not allocate unless b is refused, in which
// case it returns the drop class and a reason beginning "malformed: " or
// "unsupported: ".
func (p *packet) parse(b []byte) (dropClass, string) {
	if len(b) == 0 {
		return dropMalformed, "malformed: empty packet"
	}
	if v := b[0] >> 4; v != 4 {
		return dropUnsupported, fmt.Sprintf("unsupported: ip version %d", v)
	}
	if len(b) < 20 {
		return dropMalformed, fmt.Sprintf("malformed: truncated ipv4 header (%d bytes)", len(b))
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < 20 {
		return dropMalformed, fmt.Sprintf("malformed: bad ipv4 header length %d", ihl)
	}
	if ihl > len(b) {
		return dropMalformed, fmt.Sprintf("malformed: truncated ipv4 header (%d of %d bytes)", len(b), ihl)
	}
	total := int(binary.BigEndian.Uint16(b[2:]))
	if total < ihl {
		return dropMalformed, fmt.Sprintf("malformed: ipv4 total length %d shorter than its header (%d bytes)", total, ihl)
	}
	if total > len(b) {
		return dropMalformed, fmt.Sprintf("malformed: truncated packet (ipv4 total length %d, %d bytes present)", total, len(b))
	}
	b = b[:total]
	if frag := binary.BigEndian.Uint16(b[6:]); frag&0x3fff != 0 {
		// MF set or a non-zero offset. Translating fragments needs
		// reassembly or per-fragment-ID state (RFC 4787 REQ-14); the lab
		// avoids fragmenting instead.
		return dropUnsupported, fmt.Sprintf("unsupported: ipv4 fragment (offset %d, more fragments %t)", (frag&0x1fff)*8, frag&0x2000 != 0)
	}
	*p = packet{
		b:   b,
		l4:  ihl,
		src: netip.AddrFrom4([4]byte(b[12:16])),
		dst: netip.AddrFrom4([4]byte(b[16:20])),
	}
	l4 := b[ihl:]
	switch b[9] {
	case ipProtoTCP:
		p.proto = TCP
		if len(l4) < 20 {
			return dropMalformed, fmt.Sprintf("malformed: truncated tcp header (%d bytes)", len(l4))
		}
		if off := int(l4[12]>>4) * 4; off < 20 || off > len(l4) {
			return dropMalformed, fmt.Sprintf("malformed: bad tcp data offset %d (%d bytes of tcp)", off, len(l4))
		}
		p.sport = binary.BigEndian.Uint16(l4[0:])
		p.dport = binary.BigEndian.Uint16(l4[2:])
		p.tcpFlags = l4[13]
	case ipProtoUDP:
		p.proto = UDP
		if len(l4) < 8 {
			return dropMalformed, fmt.Sprintf("malformed: truncated udp header (%d bytes)", len(l4))
		}
		if n := int(binary.BigEndian.Uint16(l4[4:])); n < 8 || n > len(l4) {
			return dropMalformed, fmt.Sprintf("malformed: udp length %d does not fit %d bytes", n, len(l4))
		}
		p.sport = binary.BigEndian.Uint16(l4[0:])
		p.dport = binary.BigEndian.Uint16(l4[2:])
	case ipProtoICMP:
		p.proto = ICMP
		if len(l4) < 8 {
			return dropMalformed, fmt.Sprintf("malformed: truncated icmp header (%d bytes)", len(l4))
		}
		p.icmpType = l4[0]
		if p.isEcho() {
			id := binary.BigEndian.Uint16(l4[4:])
			p.sport, p.dport = id, id
		}
	default:
		return dropUnsupported, fmt.Sprintf("unsupported: ip protocol %d", b[9])
	}
	return dropNone, ""
}

// setSrc rewrites the source address and port (ICMP echo: identifier),
// updating every checksum incrementally.
func (p *packet) setSrc(ep netip.AddrPort) {
	p.rewrite(12, 0, p.src, p.sport, ep)
	p.src, p.sport = ep.Addr(), ep.Port()
	if p.isEcho() {
		p.dport = p.sport
	}
}

// setDst rewrites the destination address and port (ICMP echo:
// identifier), updating every checksum incrementally.
func (p *packet) setDst(ep netip.AddrPort) {
	p.rewrite(16, 2, p.dst, p.dport, ep)
	p.dst, p.dport = ep.Addr(), ep.Port()
	if p.isEcho() {
		p.sport = p.dport
	}
}

// rewrite replaces the address at b[addrOff:] and the port at
// b[l4+portOff:] (for ICMP echo the identifier, whatever portOff says).
func (p *packet) rewrite(addrOff, portOff int, oldAddr netip.Addr, oldPort uint16, ep netip.AddrPort) {
	b := p.b
	oa, na := oldAddr.As4(), ep.Addr().As4()
	var addr csumDelta
	addr.addr(oa, na)
	copy(b[addrOff:addrOff+4], na[:])
	addr.fix(b, 10)

	// TCP and UDP checksums cover a pseudo-header holding both addresses
	// (RFC 793, RFC 768), so they take the address change too; ICMP's
	// does not.
	l4 := b[p.l4:]
	switch p.proto {
	case TCP, UDP:
		d := addr
		d.word(oldPort, ep.Port())
		binary.BigEndian.PutUint16(l4[portOff:], ep.Port())
		if p.proto == TCP {
			d.fix(l4, 16)
		} else {
			d.fixUDP(l4, 6)
		}
	case ICMP:
		if p.isEcho() {
			var d csumDelta
			d.word(oldPort, ep.Port())
			binary.BigEndian.PutUint16(l4[4:], ep.Port())
			d.fix(l4, 2)
		}
	}
}

// String describes the packet as "udp 192.168.1.2:5000 → 203.0.113.10:40001"
// (ICMP: "icmp echo-request 192.168.1.2 id 7 → 198.51.100.7").
func (p *packet) String() string {
	if p.proto == ICMP {
		switch p.icmpType {
		case icmpEchoRequest:
			return fmt.Sprintf("icmp echo-request %s id %d → %s", p.src, p.sport, p.dst)
		case icmpEchoReply:
			return fmt.Sprintf("icmp echo-reply %s → %s id %d", p.src, p.dst, p.dport)
		}
		return fmt.Sprintf("icmp type %d %s → %s", p.icmpType, p.src, p.dst)
	}
	return fmt.Sprintf("%s %s → %s", p.proto, p.srcEP(), p.dstEP())
}
