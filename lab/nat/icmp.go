package nat

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/latticelab/lattice/internal/inet"
)

// ICMP errors (RFC 5508). An error about a translated flow quotes
// the offending packet's IP header and first 8 payload bytes as the packet
// looked on the erroring side, so the NAT rewrites the quoted packet too:
// its address and port or echo identifier, its IP header checksum, its
// transport checksum when the quote reaches it, and the outer ICMP checksum,
// which covers the whole quote. The mapping is looked up through the quote,
// never created, and never refreshed: RFC 5508 forbids ICMP errors to
// refresh a session, lest forged errors keep one alive.

// quote is the packet an ICMP error quotes, located inside the error.
type quote struct {
	off   int // offset of the quoted IP header in the outer packet
	l4    int // offset of the quoted transport header in the outer packet
	proto Proto
	// src and dst are the quoted endpoints; for an echo both ports are the
	// identifier, as in packet.
	src, dst netip.AddrPort
}

// isICMPError reports the ICMP error types the NAT translates.
func isICMPError(t uint8) bool {
	return t == icmpUnreachable || t == icmpTimeExceeded || t == icmpParamProblem
}

// parseQuote locates the packet quoted by the ICMP error p.
func parseQuote(p *packet) (quote, dropClass, string) {
	q := quote{off: p.l4 + header.ICMPv4MinimumSize}
	ip := header.IPv4(p.b[q.off:])
	if len(ip) < header.IPv4MinimumSize || header.IPVersion(ip) != header.IPv4Version ||
		int(ip.HeaderLength()) < header.IPv4MinimumSize || len(ip) < int(ip.HeaderLength())+8 {
		return q, dropMalformed, fmt.Sprintf("malformed: %s quotes a truncated or non-IPv4 packet (%d bytes)", p.String(), len(ip))
	}
	ihl := int(ip.HeaderLength())
	q.l4 = q.off + ihl
	l4 := ip[ihl:] // at least 8 bytes: ports, or ICMP type, code, checksum and identifier
	var sport, dport uint16
	switch ip.Protocol() {
	case ipProtoTCP, ipProtoUDP:
		q.proto = TCP
		if ip.Protocol() == ipProtoUDP {
			q.proto = UDP
		}
		// The ports open both headers: a UDP view reads them for TCP too.
		sport, dport = header.UDP(l4).SourcePort(), header.UDP(l4).DestinationPort()
	case ipProtoICMP:
		q.proto = ICMP
		ih := header.ICMPv4(l4)
		if t := uint8(ih.Type()); t != icmpEchoRequest && t != icmpEchoReply {
			return q, dropUnsupported, fmt.Sprintf("unsupported: %s quotes icmp type %d", p.String(), t)
		}
		sport = ih.Ident()
		dport = sport
	default:
		return q, dropUnsupported, fmt.Sprintf("unsupported: %s quotes ip protocol %d", p.String(), ip.Protocol())
	}
	q.src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip.SourceAddressSlice())), sport)
	q.dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip.DestinationAddressSlice())), dport)
	return q, dropNone, ""
}

// String describes the quoted packet like packet.String.
func (q *quote) String() string {
	if q.proto == ICMP {
		return fmt.Sprintf("icmp echo %s → %s id %d", q.src.Addr(), q.dst.Addr(), q.src.Port())
	}
	return fmt.Sprintf("%s %s → %s", q.proto, q.src, q.dst)
}

// remote returns a quoted endpoint as a mapping or filter sees it.
func (q *quote) remote(ep netip.AddrPort) netip.AddrPort {
	if q.proto == ICMP {
		return netip.AddrPortFrom(ep.Addr(), 0)
	}
	return ep
}

// inboundICMPErrorLocked translates an error from outside about a packet
// the NAT sent out: the quote's source is the public endpoint of a mapping.
func (n *NAT) inboundICMPErrorLocked(now time.Time, p *packet) Result {
	if !isICMPError(p.icmpType) {
		return n.dropLocked(dropUnsupported, fmt.Sprintf("unsupported: inbound %s", p.String()))
	}
	q, class, reason := parseQuote(p)
	if class != dropNone {
		return n.dropLocked(class, reason)
	}
	if p.dst != n.cfg.Public || q.src.Addr() != n.cfg.Public {
		return n.dropLocked(dropNoMapping, fmt.Sprintf("dropped: %s about %s does not concern the public address %s", p.String(), &q, n.cfg.Public))
	}
	m := n.lookupInboundLocked(now, n.tableLocked(q.proto), q.src.Port())
	if m == nil {
		return n.dropLocked(dropNoMapping, fmt.Sprintf("dropped by %s filtering: no mapping for %s about %s", n.cfg.Filtering, p.String(), &q))
	}
	// Filter on the quoted destination, not the error's source: a router on
	// the path (traceroute, PMTU discovery) reports errors about packets
	// to a remote the internal endpoint did send to.
	if !n.permits(m, q.remote(q.dst)) {
		return n.dropLocked(dropFiltered, fmt.Sprintf("dropped by %s filtering: %s has not sent to %s (%s about %s)",
			n.cfg.Filtering, m.key.inside, q.dst.Addr(), p.String(), &q))
	}
	inside := m.key.inside
	p.setDst(netip.AddrPortFrom(inside.Addr(), p.dport))
	rewriteQuote(p, &q, false, inside)
	n.stats.Translated++
	return Result{}
}

// outboundICMPErrorLocked translates an error from inside about a packet the
// NAT let in: the quote's destination is the internal endpoint of a mapping.
func (n *NAT) outboundICMPErrorLocked(now time.Time, p *packet) Result {
	if !isICMPError(p.icmpType) {
		return n.dropLocked(dropUnsupported, fmt.Sprintf("unsupported: outbound %s", p.String()))
	}
	q, class, reason := parseQuote(p)
	if class != dropNone {
		return n.dropLocked(class, reason)
	}
	k := flowKey{inside: q.dst, remote: n.mapKey(q.remote(q.src))}
	m := n.lookupOutboundLocked(now, n.tableLocked(q.proto), k)
	if m == nil {
		return n.dropLocked(dropNoMapping, fmt.Sprintf("dropped: no mapping for %s about %s", p.String(), &q))
	}
	// Whoever inside sent the error (the host or a router), outside it
	// must come from the NAT.
	p.setSrc(netip.AddrPortFrom(n.cfg.Public, p.sport))
	rewriteQuote(p, &q, true, netip.AddrPortFrom(n.cfg.Public, m.external))
	n.stats.Translated++
	return Result{}
}

// rewriteQuote sets the quoted packet's source (dst false) or destination
// (dst true) endpoint to ep, keeping every checksum right.
func rewriteQuote(p *packet, q *quote, dst bool, ep netip.AddrPort) {
	e := quoteEdit{b: p.b}
	addrOff, portOff, old := q.off+12, q.l4, q.src
	if dst {
		addrOff, portOff, old = q.off+16, q.l4+2, q.dst
	}
	oa, na := old.Addr().As4(), ep.Addr().As4()

	var ipd inet.Delta
	ipd.Addr4(oa, na)
	e.putAddr(addrOff, na)
	e.put16(q.off+ipv4ChecksumOff, ipd.Apply(e.get16(q.off+ipv4ChecksumOff)))

	end := len(p.b)
	switch q.proto {
	case TCP, UDP:
		d := ipd // the pseudo-header holds the address
		d.Word(old.Port(), ep.Port())
		e.put16(portOff, ep.Port())
		// Only the first 8 bytes of the transport header are sure to be
		// quoted: UDP's checksum is among them, TCP's usually is not.
		if q.proto == UDP {
			if c := e.get16(q.l4 + udpChecksumOff); c != 0 {
				c = d.Apply(c)
				if c == 0 {
					c = 0xffff
				}
				e.put16(q.l4+udpChecksumOff, c)
			}
		} else if q.l4+tcpChecksumOff+2 <= end {
			e.put16(q.l4+tcpChecksumOff, d.Apply(e.get16(q.l4+tcpChecksumOff)))
		}
	case ICMP:
		var d inet.Delta
		d.Word(old.Port(), ep.Port())
		e.put16(q.l4+4, ep.Port()) // the echo identifier
		e.put16(q.l4+icmpChecksumOff, d.Apply(e.get16(q.l4+icmpChecksumOff)))
	}
	e.outer.Fix(p.b, p.l4+icmpChecksumOff)
}

// quoteEdit writes 16-bit words inside an ICMP error's quote while
// accumulating the change to the outer ICMP checksum. Every quoted field sits
// at an even offset from the ICMP header (the quote starts 8 bytes in and IP
// header lengths are multiples of 4), so word-wise deltas line up.
type quoteEdit struct {
	b     []byte
	outer inet.Delta
}

func (e *quoteEdit) get16(off int) uint16 { return binary.BigEndian.Uint16(e.b[off:]) }

func (e *quoteEdit) put16(off int, v uint16) {
	e.outer.Word(e.get16(off), v)
	binary.BigEndian.PutUint16(e.b[off:], v)
}

func (e *quoteEdit) putAddr(off int, a [4]byte) {
	e.put16(off, binary.BigEndian.Uint16(a[:2]))
	e.put16(off+2, binary.BigEndian.Uint16(a[2:]))
}
