package nat

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/latticelab/lattice/internal/inet"
)

// ICMP errors across a NAT64 (RFC 7915 sections 4.2 and 5.2). An error
// about a translated flow is translated with the packet it quotes: the
// quote's header goes to the other family, its port or echo identifier back
// to what the erroring side's peer sent, and the checksums the quote holds
// are adjusted where the quote reaches them. Packet Too Big and
// "fragmentation needed" carry an MTU 20 bytes larger on the IPv6 side (the
// header size difference). Errors never create or refresh a mapping.

// minMTU6 is the IPv6 minimum link MTU (RFC 8200 section 5): no ICMPv6
// error exceeds it, and no Packet Too Big names less.
const minMTU6 = 1280

// icmp4to6 maps an ICMP error's type and code to ICMPv6's; ok is false for
// those RFC 7915 section 4.2 says to drop.
func icmp4to6(t, c uint8) (t6, c6 uint8, ok bool) {
	switch t {
	case icmpUnreachable:
		switch c {
		case 0, 1, 5, 6, 7, 8, 11, 12: // net, host, source route, ...
			return icmp6DstUnreachable, 0, true
		case 3: // port
			return icmp6DstUnreachable, 4, true
		case 4: // fragmentation needed
			return icmp6TooBig, 0, true
		case 9, 10, 13, 15: // administratively prohibited
			return icmp6DstUnreachable, 1, true
		}
	case icmpTimeExceeded:
		return icmp6TimeExceeded, c, true
	}
	return 0, 0, false
}

// icmp6to4 maps an ICMPv6 error's type and code to ICMP's (RFC 7915
// section 5.2).
func icmp6to4(t, c uint8) (t4, c4 uint8, ok bool) {
	switch t {
	case icmp6DstUnreachable:
		switch c {
		case 0, 2, 3:
			return icmpUnreachable, 1, true // host unreachable
		case 1:
			return icmpUnreachable, 10, true // administratively prohibited
		case 4:
			return icmpUnreachable, 3, true // port unreachable
		}
	case icmp6TooBig:
		return icmpUnreachable, 4, true
	case icmp6TimeExceeded:
		return icmpTimeExceeded, c, true
	}
	return 0, 0, false
}

// inboundError translates an ICMP error from outside about a packet the
// NAT64 sent out (its quote's source is the public address).
func (x *NAT64) inboundError(now time.Time, dst []byte, p *packet) ([]byte, Result) {
	if !isICMPError(p.icmpType) {
		return nil, x.drop(dropUnsupported, fmt.Sprintf("unsupported: inbound %s", p.String()))
	}
	icmp := p.b[p.l4:]
	t6, c6, ok := icmp4to6(icmp[0], icmp[1])
	if !ok {
		return nil, x.drop(dropUnsupported, fmt.Sprintf("unsupported: icmp type %d code %d has no icmpv6 counterpart", icmp[0], icmp[1]))
	}
	q, class, reason := parseQuote(p)
	if class != dropNone {
		return nil, x.drop(class, reason)
	}
	x.n.mu.Lock()
	defer x.n.mu.Unlock()
	n := x.n
	if p.dst != n.cfg.Public || q.src.Addr() != n.cfg.Public {
		return nil, n.dropLocked(dropNoMapping, fmt.Sprintf("nat64: dropped: %s about %s does not concern the public address %s", p.String(), &q, n.cfg.Public))
	}
	m := n.lookupInboundLocked(now, n.tableLocked(q.proto), q.src.Port())
	if m == nil {
		return nil, n.dropLocked(dropNoMapping, fmt.Sprintf("nat64: dropped: no mapping for %s about %s", p.String(), &q))
	}
	inside := m.key.inside

	// Outer header and ICMPv6 header; lengths are set once the quote is in.
	start := len(dst)
	dst = header6(dst, header.IPv4(p.b), x.Embed(p.src), inside.Addr(), 0)
	dst = appendZeros(dst, header.ICMPv6MinimumSize)
	out := dst[len(dst)-header.ICMPv6MinimumSize:]
	out[0], out[1] = t6, c6
	if t6 == icmp6TooBig {
		mtu := int(binary.BigEndian.Uint16(icmp[6:8])) + header.IPv6MinimumSize - header.IPv4MinimumSize
		binary.BigEndian.PutUint32(out[4:8], uint32(max(mtu, minMTU6)))
	}

	// The quote: an IPv6 header for the quoted IPv4 one, then its
	// transport bytes, as far as the minimum MTU allows.
	qip := header.IPv4(p.b[q.off:])
	qstart := len(dst)
	qlen := int(qip.TotalLength()) - int(qip.HeaderLength())
	dst = header6(dst, qip, inside.Addr(), x.Embed(q.dst.Addr()), max(qlen, 0))
	room := minMTU6 - (len(dst) - start)
	l4 := p.b[q.l4:]
	l4 = l4[:min(len(l4), room)]
	dst = append(dst, l4...)
	newQ := dst[qstart : qstart+header.IPv6MinimumSize]
	quoteL4(dst[len(dst)-len(l4):], q.proto, 0, inside.Port(),
		checksum.Checksum(qip[12:20], 0), checksum.Checksum(newQ[8:40], 0), qlen, newQ, false)

	ip := dst[start:]
	binary.BigEndian.PutUint16(ip[4:6], uint16(len(ip)-header.IPv6MinimumSize))
	msg := ip[header.IPv6MinimumSize:]
	binary.BigEndian.PutUint16(msg[2:4], ^checksum.Checksum(msg, inet.PseudoHeaderSum(ip, ipProtoICMPv6, len(msg))))
	n.stats.Translated++
	return dst, Result{}
}

// outboundError translates an ICMPv6 error from inside about a packet the
// NAT64 let in (its quote's destination is an inside endpoint of a
// mapping).
func (x *NAT64) outboundError(now time.Time, dst []byte, p *ip6) ([]byte, Result) {
	icmp := p.l4
	t4, c4, ok := icmp6to4(icmp[0], icmp[1])
	if !ok {
		return nil, x.drop(dropUnsupported, fmt.Sprintf("unsupported: icmpv6 type %d code %d from %s has no icmp counterpart", icmp[0], icmp[1], p.src))
	}
	qp, class, reason := parseIP6(icmp[header.ICMPv6MinimumSize:], true)
	if class == dropNone && len(qp.l4) < 8 {
		class, reason = dropMalformed, fmt.Sprintf("malformed: icmpv6 error quotes %d transport bytes", len(qp.l4))
	}
	if class != dropNone {
		return nil, x.drop(class, "quoted packet: "+reason)
	}
	if !x.prefix.Contains(qp.src) {
		return nil, x.drop(dropNoMapping, fmt.Sprintf("dropped: icmpv6 error about a packet from %s, outside the nat64 prefix", qp.src))
	}
	remote := netip.AddrFrom4([4]byte(qp.src.AsSlice()[12:]))
	qpk, class, reason := qp.asPacket(remote)
	if class != dropNone {
		return nil, x.drop(class, "quoted packet: "+reason)
	}
	x.n.mu.Lock()
	defer x.n.mu.Unlock()
	n := x.n
	// The quote is remote → inside: its destination is the mapping's
	// inside endpoint, and under endpoint-independent mapping the key's
	// remote part is zero.
	inside, from := netip.AddrPortFrom(qp.dst, qpk.dport), netip.AddrPortFrom(remote, qpk.sport)
	if qpk.proto == ICMP {
		from = netip.AddrPortFrom(remote, 0)
	}
	m := n.lookupOutboundLocked(now, n.tableLocked(qpk.proto), flowKey{inside: inside, remote: n.mapKey(from)})
	if m == nil {
		return nil, n.dropLocked(dropNoMapping, fmt.Sprintf("nat64: dropped: no mapping for an icmpv6 error about %s %s → %s", qpk.proto, from, inside))
	}
	start := len(dst)
	dst = appendZeros(dst, header.IPv4MinimumSize+header.ICMPv4MinimumSize)
	out := dst[start+header.IPv4MinimumSize:]
	out[0], out[1] = t4, c4
	if t4 == icmpUnreachable && c4 == 4 {
		mtu := int(binary.BigEndian.Uint32(icmp[4:8])) - (header.IPv6MinimumSize - header.IPv4MinimumSize)
		binary.BigEndian.PutUint16(out[6:8], uint16(min(max(mtu, 68), 0xffff)))
	}
	qstart := len(dst)
	dst = appendZeros(dst, header.IPv4MinimumSize)
	qip := header.IPv4(dst[qstart:])
	qip[0] = 0x45
	qip.SetTotalLength(uint16(min(header.IPv4MinimumSize+int(header.IPv6(qp.b).PayloadLength()), 0xffff)))
	qip.SetTTL(header.IPv6(qp.b).HopLimit())
	qip[9] = qp.next
	if qp.next == ipProtoICMPv6 {
		qip[9] = ipProtoICMP
	}
	r4, pub := remote.As4(), n.cfg.Public.As4()
	copy(qip[12:16], r4[:])
	copy(qip[16:20], pub[:])
	inet.SetIPv4Checksum(qip)
	// RFC 792 asks for the header and 8 bytes; the quote is kept as the
	// IPv6 host sent it, up to 576 bytes of ICMP (RFC 1812 section 4.3.2.3).
	l4 := qp.l4[:min(len(qp.l4), 576-header.IPv4MinimumSize-header.ICMPv4MinimumSize-header.IPv4MinimumSize)]
	dst = append(dst, l4...)
	quoteL4(dst[len(dst)-len(l4):], qpk.proto, 2, m.external,
		checksum.Checksum(qp.b[8:40], 0), checksum.Checksum(qip[12:20], 0), int(header.IPv6(qp.b).PayloadLength()), qp.b, true)

	ip := header.IPv4(dst[start : start+header.IPv4MinimumSize])
	ip[0] = 0x45
	tc, _ := header.IPv6(p.b).TOS()
	ip[1] = tc
	ip.SetTotalLength(uint16(len(dst) - start))
	x.ipID++
	ip.SetID(x.ipID)
	ip.SetTTL(header.IPv6(p.b).HopLimit())
	ip[9] = ipProtoICMP
	copy(ip[12:16], pub[:])
	d4 := p.dst.As16()
	copy(ip[16:20], d4[12:])
	inet.SetIPv4Checksum(ip)
	msg := dst[start+header.IPv4MinimumSize:]
	binary.BigEndian.PutUint16(msg[2:4], inet.Checksum(msg))
	n.stats.Translated++
	return dst, Result{}
}

// quoteL4 rewrites the quoted transport bytes t (of proto, which may be cut
// short) for the other family: the port at portOff (or the echo
// identifier) to port, and the checksum, where t reaches it, from the old
// pseudo-header's address sum to the new one's. For quoted echo, the type
// changes too, and ICMPv6's pseudo-header (over v6, the quoted packet's
// IPv6 header, and the quoted length n) comes or goes.
func quoteL4(t []byte, proto Proto, portOff int, port uint16, oldAddrs, newAddrs uint16, n int, v6 []byte, toV4 bool) {
	var d inet.Delta
	switch proto {
	case TCP, UDP:
		d.Word(oldAddrs, newAddrs)
		d.Word(binary.BigEndian.Uint16(t[portOff:]), port)
		binary.BigEndian.PutUint16(t[portOff:], port)
		if proto == UDP {
			d.FixUDP(t, udpChecksumOff)
		} else if len(t) >= tcpChecksumOff+2 {
			d.Fix(t, tcpChecksumOff)
		}
	case ICMP:
		pseudo := inet.PseudoHeaderSum(v6, ipProtoICMPv6, n)
		if toV4 {
			d.Word(pseudo, 0)
		} else {
			d.Word(0, pseudo)
		}
		old := binary.BigEndian.Uint16(t)
		t[0] = echoType(t[0], toV4)
		d.Word(old, binary.BigEndian.Uint16(t))
		d.Word(binary.BigEndian.Uint16(t[4:]), port)
		binary.BigEndian.PutUint16(t[4:], port)
		d.Fix(t, icmpChecksumOff)
	}
}
