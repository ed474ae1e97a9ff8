package nat

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/latticelab/lattice/internal/inet"
)

// WellKnownPrefix64 is the NAT64 well-known prefix (RFC 6052 section 2.1).
var WellKnownPrefix64 = netip.MustParsePrefix("64:ff9b::/96")

// NAT64Config describes a stateful NAT64 (RFC 6146): IPv6-only hosts inside
// reach IPv4 hosts outside at Prefix+IPv4 (RFC 6052), from Public. Its zero
// value but Public works: the well-known prefix, random ports from
// 1024-65535 and the NAT's default timeouts.
type NAT64Config struct {
	// Public is the IPv4 address translated flows leave from. Required.
	Public netip.Addr
	// Prefix is the /96 IPv4 addresses are embedded in (RFC 6052 section
	// 2.2, the /96 format). If zero, 64:ff9b::/96.
	Prefix netip.Prefix
	// PortMin and PortMax bound external ports and echo identifiers. If
	// zero, 1024 and 65535.
	PortMin, PortMax uint16
	// Timeouts as in Config. If zero, 2m, 2h4m, 4m and 60s (RFC 6146
	// section 4 takes them from RFC 4787, RFC 5382 and RFC 5508).
	UDPTimeout, TCPEstablishedTimeout, TCPTransitoryTimeout, ICMPTimeout time.Duration
	// MaxMappings caps the live mappings (the binding information bases of
	// RFC 6146 together). If zero, 65536: state is always bounded.
	MaxMappings int
	// Seed seeds port allocation. If zero, seed 0.
	Seed uint64
}

// DefaultNAT64MaxMappings bounds a NAT64's state when MaxMappings is zero.
const DefaultNAT64MaxMappings = 65536

// Validate reports the first invalid field. Errors match ErrInvalidConfig.
func (c NAT64Config) Validate() error {
	if c.Prefix.IsValid() || c.Prefix != (netip.Prefix{}) {
		switch {
		case !c.Prefix.IsValid() || !c.Prefix.Addr().Is6() || c.Prefix.Addr().Is4In6():
			return invalid(fmt.Sprintf("nat64 prefix %s is not an IPv6 prefix", c.Prefix))
		case c.Prefix.Bits() != 96:
			return invalid(fmt.Sprintf("nat64 prefix %s is not a /96", c.Prefix))
		case c.Prefix != c.Prefix.Masked():
			return invalid(fmt.Sprintf("nat64 prefix %s has host bits set", c.Prefix))
		}
	}
	return c.natConfig().Validate()
}

// natConfig is the NAT44 machinery's configuration: RFC 6146 section 3.5.1
// and 3.5.2 make mapping endpoint-independent, and filtering
// endpoint-independent is the behaviour section 3.5.2.3 lets implementations
// choose (REQ-8 of RFC 4787) for application transparency.
func (c NAT64Config) natConfig() Config {
	max := c.MaxMappings
	if max == 0 {
		max = DefaultNAT64MaxMappings
	}
	return Config{
		Public: c.Public, Mapping: EndpointIndependent, Filtering: EndpointIndependent,
		PortAllocation: Random, PortMin: c.PortMin, PortMax: c.PortMax,
		UDPTimeout: c.UDPTimeout, TCPEstablishedTimeout: c.TCPEstablishedTimeout,
		TCPTransitoryTimeout: c.TCPTransitoryTimeout, ICMPTimeout: c.ICMPTimeout,
		MaxMappings: max, Seed: c.Seed,
	}
}

// NAT64 is a stateful NAT64 (RFC 6146) with RFC 7915 header translation of
// UDP, TCP, ICMP echo and the ICMP errors about them. Its mappings are a
// NAT's (the same tables, allocation, timeouts and counters) whose inside
// endpoints are IPv6. Pure logic like NAT: no goroutines, no clock; safe for
// concurrent use.
type NAT64 struct {
	prefix netip.Prefix
	n      *NAT
	ipID   uint16 // guarded by n.mu; IPv4 identification of translated packets
}

// NewNAT64 returns a NAT64 with no mappings, or the configuration's error.
func NewNAT64(cfg NAT64Config) (*NAT64, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n, err := New(cfg.natConfig())
	if err != nil {
		return nil, err
	}
	x := &NAT64{prefix: cfg.Prefix, n: n}
	if !x.prefix.IsValid() {
		x.prefix = WellKnownPrefix64
	}
	return x, nil
}

// Prefix returns the /96 IPv4 addresses are embedded in.
func (x *NAT64) Prefix() netip.Prefix { return x.prefix }

// Public returns the IPv4 address translated flows leave from.
func (x *NAT64) Public() netip.Addr { return x.n.cfg.Public }

// Stats returns the counters, as NAT.Stats counts them.
func (x *NAT64) Stats() Stats { return x.n.Stats() }

// Mappings lists the live mappings; Inside endpoints are IPv6.
func (x *NAT64) Mappings(now time.Time) []MappingInfo { return x.n.Mappings(now) }

// Embed returns the IPv6 address of IPv4 address a under the prefix (RFC
// 6052 section 2.2).
func (x *NAT64) Embed(a netip.Addr) netip.Addr { return Embed64(x.prefix, a) }

// Embed64 returns IPv4 address a embedded in /96 prefix p (RFC 6052).
func Embed64(p netip.Prefix, a netip.Addr) netip.Addr {
	b := p.Addr().As16()
	a4 := a.As4()
	copy(b[12:], a4[:])
	return netip.AddrFrom16(b)
}

// Translate translates pkt, an IPv6 packet from inside (dir FromInside) or
// an IPv4 packet from outside (FromOutside), into the other family. The
// result is appended to dst[:0], which needs room for len(pkt)+40 bytes to
// avoid allocating; pkt is never modified. The hop limit or TTL is copied,
// not decremented: that is the router's. On Drop the returned slice is nil.
func (x *NAT64) Translate(now time.Time, dst, pkt []byte, dir Direction) ([]byte, Result) {
	switch dir {
	case FromInside:
		return x.outbound(now, dst[:0], pkt)
	case FromOutside:
		return x.inbound(now, dst[:0], pkt)
	}
	return nil, x.drop(dropUnsupported, fmt.Sprintf("unsupported: direction %d", int(dir)))
}

func (x *NAT64) drop(class dropClass, reason string) Result {
	x.n.mu.Lock()
	defer x.n.mu.Unlock()
	return x.n.dropLocked(class, "nat64: "+reason)
}

// ip6 is what the translator reads of an IPv6 packet's fixed header.
type ip6 struct {
	b        []byte // the packet, trimmed to its payload length
	src, dst netip.Addr
	next     uint8
	l4       []byte
}

func parseIP6(b []byte, quoted bool) (ip6, dropClass, string) {
	if len(b) == 0 {
		return ip6{}, dropMalformed, "malformed: empty packet"
	}
	if v := header.IPVersion(b); v != header.IPv6Version {
		return ip6{}, dropUnsupported, fmt.Sprintf("unsupported: ip version %d from the ipv6 side", v)
	}
	if len(b) < header.IPv6MinimumSize {
		return ip6{}, dropMalformed, fmt.Sprintf("malformed: %d-byte packet is shorter than an ipv6 header", len(b))
	}
	n := int(header.IPv6(b).PayloadLength())
	if quoted {
		n = min(n, len(b)-header.IPv6MinimumSize)
	} else if header.IPv6MinimumSize+n > len(b) {
		return ip6{}, dropMalformed, fmt.Sprintf("malformed: ipv6 payload length %d in %d bytes", n, len(b)-header.IPv6MinimumSize)
	}
	b = b[:header.IPv6MinimumSize+n]
	p := ip6{b: b, src: netip.AddrFrom16([16]byte(b[8:24])), dst: netip.AddrFrom16([16]byte(b[24:40])), next: b[6], l4: b[header.IPv6MinimumSize:]}
	switch p.next {
	case ipProtoTCP, ipProtoUDP, uint8(header.ICMPv6ProtocolNumber):
		return p, dropNone, ""
	case uint8(header.IPv6FragmentHeader):
		return p, dropUnsupported, "unsupported: ipv6 fragments are not translated"
	}
	return p, dropUnsupported, fmt.Sprintf("unsupported: ipv6 next header %d", p.next)
}

// ICMPv6 types translated (RFC 4443).
const (
	icmp6DstUnreachable = uint8(header.ICMPv6DstUnreachable)
	icmp6TooBig         = uint8(header.ICMPv6PacketTooBig)
	icmp6TimeExceeded   = uint8(header.ICMPv6TimeExceeded)
	icmp6ParamProblem   = uint8(header.ICMPv6ParamProblem)
	icmp6Echo           = uint8(header.ICMPv6EchoRequest)
	icmp6Reply          = uint8(header.ICMPv6EchoReply)
	ipProtoICMPv6       = uint8(header.ICMPv6ProtocolNumber)
)

// asPacket fills a packet (the NAT's view) from an IPv6 packet whose
// destination has been extracted to v4; ICMPv6 echo becomes ICMP echo.
func (p *ip6) asPacket(v4 netip.Addr) (packet, dropClass, string) {
	q := packet{src: p.src, dst: v4}
	t := p.l4
	switch p.next {
	case ipProtoTCP:
		q.proto = TCP
		if len(t) < header.TCPMinimumSize {
			return q, dropMalformed, fmt.Sprintf("malformed: truncated tcp header (%d bytes)", len(t))
		}
		q.sport, q.dport, q.tcpFlags = header.TCP(t).SourcePort(), header.TCP(t).DestinationPort(), uint8(header.TCP(t).Flags())
	case ipProtoUDP:
		q.proto = UDP
		if len(t) < header.UDPMinimumSize {
			return q, dropMalformed, fmt.Sprintf("malformed: truncated udp header (%d bytes)", len(t))
		}
		q.sport, q.dport = header.UDP(t).SourcePort(), header.UDP(t).DestinationPort()
	default:
		q.proto = ICMP
		if len(t) < header.ICMPv6MinimumSize+4 {
			return q, dropMalformed, fmt.Sprintf("malformed: truncated icmpv6 header (%d bytes)", len(t))
		}
		switch t[0] {
		case icmp6Echo:
			q.icmpType = icmpEchoRequest
		case icmp6Reply:
			q.icmpType = icmpEchoReply
		default:
			q.icmpType = t[0]
			return q, dropNone, ""
		}
		q.sport = binary.BigEndian.Uint16(t[4:6])
		q.dport = q.sport
	}
	return q, dropNone, ""
}

// outbound translates an IPv6 packet from inside to IPv4 (RFC 7915
// section 5).
func (x *NAT64) outbound(now time.Time, dst, pkt []byte) ([]byte, Result) {
	p, class, reason := parseIP6(pkt, false)
	if class != dropNone {
		return nil, x.drop(class, reason)
	}
	if total := header.IPv4MinimumSize + len(p.l4); total > inet.MaxIPv4Datagram {
		// An IPv6 payload may be 65535 bytes, an IPv4 packet, header
		// included, no more.
		return nil, x.drop(dropUnsupported, fmt.Sprintf("unsupported: a %d-byte ipv6 payload makes a %d-byte ipv4 packet, more than %d", len(p.l4), total, inet.MaxIPv4Datagram))
	}
	if !x.prefix.Contains(p.dst) {
		return nil, x.drop(dropNoMapping, fmt.Sprintf("dropped: %s is not in the nat64 prefix %s", p.dst, x.prefix))
	}
	v4 := netip.AddrFrom4([4]byte(p.dst.AsSlice()[12:]))
	if v4.IsUnspecified() || v4.IsLoopback() || v4.IsMulticast() || v4 == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		// These name no remote host; sending to them would be a spoofing tool.
		return nil, x.drop(dropUnsupported, fmt.Sprintf("unsupported: %s embeds %s, not a unicast IPv4 address", p.dst, v4))
	}
	q, class, reason := p.asPacket(v4)
	if class != dropNone {
		return nil, x.drop(class, reason)
	}
	if q.proto == ICMP && !q.isEcho() {
		return x.outboundError(now, dst, &p)
	}
	x.n.mu.Lock()
	defer x.n.mu.Unlock()
	n := x.n
	if q.proto == ICMP && q.icmpType != icmpEchoRequest {
		return nil, n.dropLocked(dropUnsupported, fmt.Sprintf("nat64: unsupported: outbound %s", q.String()))
	}
	m, isNew, drop := n.mapOutboundLocked(now, &q)
	if m == nil {
		drop.Reason = "nat64: " + drop.Reason
		return nil, drop
	}
	ext := netip.AddrPortFrom(n.cfg.Public, m.external)
	dst = x.header4Locked(dst, &p, n.cfg.Public, v4)
	dst = translateL4(dst, p.l4, &p, q.proto, ext.Port(), true)
	n.stats.Translated++
	if isNew {
		return dst, Result{Reason: "nat64: " + newMappingNote(q.proto, q.srcEP(), ext)}
	}
	return dst, Result{}
}

// header4Locked appends the IPv4 header of a packet translated from p
// (RFC 7915 section 5.1): traffic class to TOS, hop limit to TTL, DF set
// when the packet exceeds 1260 bytes (it may then need Packet Too Big) and
// a fresh identification.
func (x *NAT64) header4Locked(dst []byte, p *ip6, src, to netip.Addr) []byte {
	total := header.IPv4MinimumSize + len(p.l4)
	dst = appendZeros(dst, header.IPv4MinimumSize)
	h := header.IPv4(dst[len(dst)-header.IPv4MinimumSize:])
	var flags uint8
	if total > 1260 {
		flags = header.IPv4FlagDontFragment
	}
	x.ipID++
	proto := p.next
	if proto == ipProtoICMPv6 {
		proto = ipProtoICMP
	}
	tc, _ := header.IPv6(p.b).TOS()
	h[0] = 0x45
	h[1] = tc
	h.SetTotalLength(uint16(total))
	h.SetID(x.ipID)
	h.SetFlagsFragmentOffset(flags, 0)
	h.SetTTL(header.IPv6(p.b).HopLimit())
	h[9] = proto
	s4, d4 := src.As4(), to.As4()
	copy(h[12:16], s4[:])
	copy(h[16:20], d4[:])
	inet.SetIPv4Checksum(h)
	return dst
}

// header6 appends the IPv6 header of a packet translated from IPv4 header
// h with payload length n (RFC 7915 section 4.1).
func header6(dst []byte, h header.IPv4, src, to netip.Addr, n int) []byte {
	next := h.Protocol()
	if next == ipProtoICMP {
		next = ipProtoICMPv6
	}
	dst = appendZeros(dst, header.IPv6MinimumSize)
	out := dst[len(dst)-header.IPv6MinimumSize:]
	binary.BigEndian.PutUint32(out[0:4], 6<<28|uint32(h[1])<<20)
	binary.BigEndian.PutUint16(out[4:6], uint16(n))
	out[6], out[7] = next, h.TTL()
	s6, d6 := src.As16(), to.As16()
	copy(out[8:24], s6[:])
	copy(out[24:40], d6[:])
	return dst
}

// translateL4 appends transport header and payload l4 (of proto), with its
// port (outbound: source; inbound: destination) or echo identifier set to
// port, and its checksum moved from the old pseudo-header to the new one
// incrementally. dst ends with the packet's new IP header (IPv4 if toV4);
// old.b holds the packet as it arrived. ICMP echo changes type and gains
// or loses ICMPv6's pseudo-header.
func translateL4(dst, l4 []byte, old *ip6, proto Proto, port uint16, toV4 bool) []byte {
	start := len(dst)
	ipStart := start - header.IPv4MinimumSize
	if !toV4 {
		ipStart = start - header.IPv6MinimumSize
	}
	dst = append(dst, l4...)
	t, ip := dst[start:], dst[ipStart:start]
	// The address words of the pseudo-headers; protocol and length are
	// the same in both families.
	var oldPseudo, newPseudo uint16
	if toV4 {
		oldPseudo, newPseudo = checksum.Checksum(old.b[8:40], 0), checksum.Checksum(ip[12:20], 0)
	} else {
		// old.b holds the IPv4 packet here.
		oldPseudo, newPseudo = checksum.Checksum(old.b[12:20], 0), checksum.Checksum(ip[8:40], 0)
	}
	var d inet.Delta
	switch proto {
	case TCP, UDP:
		portOff := 0
		if !toV4 {
			portOff = 2
		}
		d.Word(oldPseudo, newPseudo)
		d.Word(binary.BigEndian.Uint16(t[portOff:]), port)
		binary.BigEndian.PutUint16(t[portOff:], port)
		if proto == TCP {
			d.Fix(t, tcpChecksumOff)
		} else if binary.BigEndian.Uint16(t[udpChecksumOff:]) == 0 {
			// IPv4 UDP may go without a checksum, IPv6 UDP may not (RFC
			// 7915 section 4.5): compute it.
			binary.BigEndian.PutUint16(t[udpChecksumOff:], udpChecksum6(ip, t))
		} else {
			d.FixUDP(t, udpChecksumOff)
		}
	case ICMP:
		// ICMPv6 sums a pseudo-header with next header 58 (RFC 4443
		// section 2.3); ICMP sums none.
		oldType := binary.BigEndian.Uint16(t)
		if toV4 {
			d.Word(inet.PseudoHeaderSum(old.b, ipProtoICMPv6, len(t)), 0)
			t[0] = echoType(t[0], true)
		} else {
			d.Word(0, inet.PseudoHeaderSum(ip, ipProtoICMPv6, len(t)))
			t[0] = echoType(t[0], false)
		}
		d.Word(oldType, binary.BigEndian.Uint16(t))
		d.Word(binary.BigEndian.Uint16(t[4:]), port)
		binary.BigEndian.PutUint16(t[4:], port)
		d.Fix(t, icmpChecksumOff)
	}
	return dst
}

func udpChecksum6(ip, t []byte) uint16 {
	binary.BigEndian.PutUint16(t[udpChecksumOff:], 0)
	c := ^checksum.Checksum(t, inet.PseudoHeaderSum(ip, ipProtoUDP, len(t)))
	if c == 0 {
		c = 0xffff
	}
	return c
}

// inbound translates an IPv4 packet from outside to IPv6 (RFC 7915 section
// 4), only through an existing mapping (RFC 6146 section 3.5).
func (x *NAT64) inbound(now time.Time, dst, pkt []byte) ([]byte, Result) {
	var p packet
	class, reason := p.parse(pkt)
	if class != dropNone {
		return nil, x.drop(class, reason)
	}
	if p.fragOff != 0 || p.more {
		return nil, x.drop(dropUnsupported, fmt.Sprintf("unsupported: ipv4 fragments are not translated (%s)", p.String()))
	}
	if p.proto == ICMP && !p.isEcho() {
		return x.inboundError(now, dst, &p)
	}
	x.n.mu.Lock()
	defer x.n.mu.Unlock()
	n := x.n
	if p.proto == ICMP && p.icmpType != icmpEchoReply {
		return nil, n.dropLocked(dropUnsupported, fmt.Sprintf("nat64: unsupported: inbound %s", p.String()))
	}
	if p.dst != n.cfg.Public {
		return nil, n.dropLocked(dropNoMapping, fmt.Sprintf("nat64: dropped: %s is not addressed to the public address %s", p.String(), n.cfg.Public))
	}
	m := n.lookupInboundLocked(now, n.tableLocked(p.proto), p.dport)
	if res, ok := n.admitLocked(m, &p, remoteEP(&p, false)); !ok {
		res.Reason = "nat64: " + res.Reason
		return nil, res
	}
	n.noteInboundLocked(now, m, p.tcpFlags)
	ip := header.IPv4(p.b)
	old := ip6{b: p.b}
	dst = header6(dst, ip, x.Embed(p.src), m.key.inside.Addr(), len(p.b)-p.l4)
	dst = translateL4(dst, p.b[p.l4:], &old, p.proto, m.key.inside.Port(), false)
	n.stats.Translated++
	return dst, Result{}
}

// echoType maps an echo type between ICMPv6 and ICMP (RFC 7915 sections
// 4.2 and 5.2).
func echoType(t uint8, toV4 bool) uint8 {
	switch {
	case toV4 && t == icmp6Echo:
		return icmpEchoRequest
	case toV4:
		return icmpEchoReply
	case t == icmpEchoRequest:
		return icmp6Echo
	}
	return icmp6Reply
}

// appendZeros extends b by n zero bytes.
func appendZeros(b []byte, n int) []byte {
	b = slices.Grow(b, n)
	b = b[:len(b)+n]
	clear(b[len(b)-n:])
	return b
}
