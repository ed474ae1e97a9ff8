package nat

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/latticelab/lattice/internal/inet"
)

// IP protocol numbers, TCP flags and ICMP types the NAT looks at.
const (
	ipProtoICMP = uint8(header.ICMPv4ProtocolNumber)
	ipProtoTCP  = uint8(header.TCPProtocolNumber)
	ipProtoUDP  = uint8(header.UDPProtocolNumber)

	tcpFIN = uint8(header.TCPFlagFin)
	tcpSYN = uint8(header.TCPFlagSyn)
	tcpRST = uint8(header.TCPFlagRst)
	tcpACK = uint8(header.TCPFlagAck)

	icmpEchoReply    = uint8(header.ICMPv4EchoReply)
	icmpUnreachable  = uint8(header.ICMPv4DstUnreachable)
	icmpEchoRequest  = uint8(header.ICMPv4Echo)
	icmpTimeExceeded = uint8(header.ICMPv4TimeExceeded)
	icmpParamProblem = uint8(header.ICMPv4ParamProblem)
)

// Checksum offsets within their headers, for inet.Delta.Fix.
const (
	ipv4ChecksumOff = 10
	tcpChecksumOff  = header.TCPChecksumOffset
	udpChecksumOff  = 6
	icmpChecksumOff = 2
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
	// fragID, fragOff and more are the IPv4 fragment fields: an offset
	// other than zero is a later fragment, which parse leaves without
	// ports; more with offset zero is a first fragment.
	fragID  uint16
	fragOff int
	more    bool
}

// laterFragment reports a fragment after the first.
func (p *packet) laterFragment() bool { return p.fragOff != 0 }

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
	if v := header.IPVersion(b); v != header.IPv4Version {
		return dropUnsupported, fmt.Sprintf("unsupported: ip version %d", v)
	}
	if len(b) < header.IPv4MinimumSize {
		return dropMalformed, fmt.Sprintf("malformed: truncated ipv4 header (%d bytes)", len(b))
	}
	ip := header.IPv4(b)
	ihl := int(ip.HeaderLength())
	if ihl < header.IPv4MinimumSize {
		return dropMalformed, fmt.Sprintf("malformed: bad ipv4 header length %d", ihl)
	}
	if ihl > len(b) {
		return dropMalformed, fmt.Sprintf("malformed: truncated ipv4 header (%d of %d bytes)", len(b), ihl)
	}
	total := int(ip.TotalLength())
	if total < ihl {
		return dropMalformed, fmt.Sprintf("malformed: ipv4 total length %d shorter than its header (%d bytes)", total, ihl)
	}
	if total > len(b) {
		return dropMalformed, fmt.Sprintf("malformed: truncated packet (ipv4 total length %d, %d bytes present)", total, len(b))
	}
	ip = ip[:total]
	*p = packet{
		b:       ip,
		l4:      ihl,
		src:     netip.AddrFrom4([4]byte(ip.SourceAddressSlice())),
		dst:     netip.AddrFrom4([4]byte(ip.DestinationAddressSlice())),
		fragID:  ip.ID(),
		fragOff: int(ip.FragmentOffset()),
		more:    ip.More(),
	}
	if p.fragOff != 0 {
		// A later fragment: no transport header (see fragment.go).
		switch ip.Protocol() {
		case ipProtoTCP:
			p.proto = TCP
		case ipProtoUDP:
			p.proto = UDP
		case ipProtoICMP:
			p.proto = ICMP
		default:
			return dropUnsupported, fmt.Sprintf("unsupported: ip protocol %d", ip.Protocol())
		}
		return dropNone, ""
	}
	l4 := ip[ihl:]
	switch ip.Protocol() {
	case ipProtoTCP:
		p.proto = TCP
		if len(l4) < header.TCPMinimumSize {
			return dropMalformed, fmt.Sprintf("malformed: truncated tcp header (%d bytes)", len(l4))
		}
		th := header.TCP(l4)
		if off := int(th.DataOffset()); off < header.TCPMinimumSize || off > len(l4) {
			return dropMalformed, fmt.Sprintf("malformed: bad tcp data offset %d (%d bytes of tcp)", off, len(l4))
		}
		p.sport, p.dport = th.SourcePort(), th.DestinationPort()
		p.tcpFlags = uint8(th.Flags())
	case ipProtoUDP:
		p.proto = UDP
		if len(l4) < header.UDPMinimumSize {
			return dropMalformed, fmt.Sprintf("malformed: truncated udp header (%d bytes)", len(l4))
		}
		uh := header.UDP(l4)
		// A first fragment holds only part of the datagram UDP's length
		// counts.
		if n := int(uh.Length()); n < header.UDPMinimumSize || (n > len(l4) && !p.more) {
			return dropMalformed, fmt.Sprintf("malformed: udp length %d does not fit %d bytes", n, len(l4))
		}
		p.sport, p.dport = uh.SourcePort(), uh.DestinationPort()
	case ipProtoICMP:
		p.proto = ICMP
		if len(l4) < header.ICMPv4MinimumSize {
			return dropMalformed, fmt.Sprintf("malformed: truncated icmp header (%d bytes)", len(l4))
		}
		ih := header.ICMPv4(l4)
		p.icmpType = uint8(ih.Type())
		if p.isEcho() {
			p.sport, p.dport = ih.Ident(), ih.Ident()
		}
	default:
		return dropUnsupported, fmt.Sprintf("unsupported: ip protocol %d", ip.Protocol())
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
	var addr inet.Delta
	addr.Addr4(oa, na)
	copy(b[addrOff:addrOff+4], na[:])
	addr.Fix(b, ipv4ChecksumOff)

	// TCP and UDP checksums cover a pseudo-header holding both addresses
	// (RFC 793, RFC 768), so they take the address change too; ICMP's
	// does not.
	l4 := b[p.l4:]
	switch p.proto {
	case TCP, UDP:
		d := addr
		d.Word(oldPort, ep.Port())
		binary.BigEndian.PutUint16(l4[portOff:], ep.Port())
		if p.proto == TCP {
			d.Fix(l4, tcpChecksumOff)
		} else {
			d.FixUDP(l4, udpChecksumOff)
		}
	case ICMP:
		if p.isEcho() {
			var d inet.Delta
			d.Word(oldPort, ep.Port())
			header.ICMPv4(l4).SetIdent(ep.Port())
			d.Fix(l4, icmpChecksumOff)
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
