package fabric

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"

	"github.com/latticelab/lattice/internal/inet"
	"github.com/latticelab/lattice/lab/nat"
)

// IPv6 forwarding (RFC 8200). Routers route IPv6 as they route IPv4, with
// no NAT66 (a NAT64 router translates IPv6 to its prefix into IPv4, see
// router64.go) and no neighbour discovery: the
// fabric knows every neighbour, as it does instead of ARP. A router never
// fragments IPv6: a packet larger than the next link's MTU is dropped and
// answered with ICMPv6 Packet Too Big (RFC 4443 section 3.2). On the
// uplink, RouterConfig.Stateful filters IPv6 as an RFC 6092 home router
// does.

const (
	icmp6PacketTooBig = 2
	icmp6EchoRequest  = 128
	icmp6EchoReply    = 129
	ipv6MinMTU        = 1280
)

// checkIPv6 validates the fixed header of p and returns the packet trimmed
// to its payload length.
func checkIPv6(p []byte) ([]byte, error) {
	if len(p) < ipv6HeaderLen {
		return nil, fmt.Errorf("malformed: %d-byte packet is shorter than an IPv6 header", len(p))
	}
	if v := p[0] >> 4; v != 6 {
		return nil, fmt.Errorf("malformed: ip version %d in an IPv6 frame", v)
	}
	n := int(binary.BigEndian.Uint16(p[4:6]))
	if ipv6HeaderLen+n > len(p) {
		return nil, fmt.Errorf("malformed: ipv6 payload length %d in %d bytes", n, len(p)-ipv6HeaderLen)
	}
	return p[:ipv6HeaderLen+n], nil
}

// input6 handles one IPv6 frame received on in. It owns f.
func (r *Router) input6(in *Interface, f []byte) {
	c := &r.stats
	p, err := checkIPv6(f[ethHeaderLen:])
	if err != nil {
		r.drop(in, f, &c.malformed, err.Error())
		return
	}
	f = f[:ethHeaderLen+len(p)]
	src, dst := netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
	if dst.IsMulticast() || dst.IsLinkLocalUnicast() || src.IsLinkLocalUnicast() || src.IsMulticast() {
		r.drop(in, f, &c.other, "ipv6 "+dst.String()+": link-local and multicast are not forwarded")
		return
	}
	if local := r.localIfc(dst); local != nil {
		r.local6(in, f, p)
		return
	}
	if p[7] <= 1 {
		r.drop(in, f, &c.ttl, "hop limit exceeded")
		return
	}
	if r.nat64 != nil && in != r.uplink && r.nat64.Prefix().Contains(dst) {
		r.forward64(in, f, p)
		return
	}
	now := r.now(in)
	if in == r.uplink && r.stateful != nil {
		if res := r.stateful.Process(now, p, nat.FromOutside); res.Verdict == nat.Drop {
			r.drop(in, f, &c.firewall, res.Reason)
			return
		}
	}
	rt := r.routes.lookup(dst)
	if rt == nil {
		r.drop(in, f, &c.noRoute, "no route to "+dst.String())
		return
	}
	out := rt.ifc
	if len(p) > out.mtu {
		r.packetTooBig(in, p, out.mtu)
		r.drop(in, f, &c.tooBig, fmt.Sprintf("%d-byte ipv6 packet exceeds %s MTU %d: answered packet too big", len(p), out, out.mtu))
		return
	}
	var note string
	if out == r.uplink && in != r.uplink && r.stateful != nil {
		res := r.stateful.Process(now, p, nat.FromInside)
		if res.Verdict == nat.Drop {
			r.drop(in, f, &c.firewall, res.Reason)
			return
		}
		if res.Reason != "" {
			note = "ipv6 firewall: " + res.Reason
		}
	}
	p[7]-- // the hop limit; IPv6 has no header checksum
	r.output6(in, out, rt, f, p, note)
}

// output6 sends IPv6 packet p (in frame f) out of out along rt.
func (r *Router) output6(in, out *Interface, rt *routeEntry, f, p []byte, note string) {
	c := &r.stats
	nh := rt.via
	if !nh.IsValid() {
		nh = netip.AddrFrom16([16]byte(p[24:40]))
	}
	nb := out.network.neighbor(nh)
	if nb == nil {
		r.drop(in, f, &c.noNeighbor, fmt.Sprintf("no neighbour %v on %v", nh, out.network))
		return
	}
	writeEth(f, nb.mac, out.mac, etherTypeIPv6)
	c.forwarded.Add(1)
	in.tx.add(out, f, note)
}

// local6 answers an ICMPv6 echo request addressed to the router and drops
// everything else.
func (r *Router) local6(in *Interface, f, p []byte) {
	c := &r.stats
	if p[6] != protoICMPv6 || len(p) < ipv6HeaderLen+8 || p[ipv6HeaderLen] != icmp6EchoRequest || p[ipv6HeaderLen+1] != 0 {
		r.drop(in, f, &c.other, "addressed to the router: not an echo request")
		return
	}
	c.local.Add(1)
	var src [16]byte
	copy(src[:], p[8:24])
	copy(p[8:24], p[24:40])
	copy(p[24:40], src[:])
	p[7] = defaultTTL
	// Swapping the addresses leaves the pseudo-header sum as it was; only
	// the type changes.
	icmp := p[ipv6HeaderLen:]
	old := binary.BigEndian.Uint16(icmp)
	icmp[0] = icmp6EchoReply
	binary.BigEndian.PutUint16(icmp[2:4], inet.Update(binary.BigEndian.Uint16(icmp[2:4]), old, binary.BigEndian.Uint16(icmp)))
	back := netip.AddrFrom16(src)
	rt := r.routes.lookup(back)
	if rt == nil {
		r.drop(in, f, &c.noRoute, "no route back to "+back.String())
		return
	}
	r.output6(in, rt.ifc, rt, f, p, "")
}

// packetTooBig answers p's sender with ICMPv6 Packet Too Big naming mtu,
// from the router's IPv6 address on in, quoting as much of p as fits in
// the minimum MTU (RFC 4443 section 3.2). It never answers an ICMPv6 error.
func (r *Router) packetTooBig(in *Interface, p []byte, mtu int) {
	if p[6] == protoICMPv6 && len(p) > ipv6HeaderLen && p[ipv6HeaderLen] < 128 {
		return
	}
	from := in.Addr6()
	src := netip.AddrFrom16([16]byte(p[8:24]))
	rt := r.routes.lookup(src)
	if !from.IsValid() || rt == nil {
		return
	}
	quote := p[:min(len(p), ipv6MinMTU-ipv6HeaderLen-8)]
	n := ipv6HeaderLen + 8 + len(quote)
	fr := getFrame(ethHeaderLen + n)
	ip := fr[ethHeaderLen:]
	binary.BigEndian.PutUint32(ip[0:4], 6<<28)
	binary.BigEndian.PutUint16(ip[4:6], uint16(8+len(quote)))
	ip[6], ip[7] = protoICMPv6, defaultTTL
	f16 := from.As16()
	copy(ip[8:24], f16[:])
	copy(ip[24:40], p[8:24])
	icmp := ip[ipv6HeaderLen:]
	clear(icmp[:8])
	icmp[0] = icmp6PacketTooBig
	binary.BigEndian.PutUint32(icmp[4:8], uint32(mtu))
	copy(icmp[8:], quote)
	binary.BigEndian.PutUint16(icmp[2:4], ^checksum.Checksum(icmp, inet.PseudoHeaderSum(ip, protoICMPv6, len(icmp))))
	r.stats.icmpSent.Add(1)
	r.output6(in, rt.ifc, rt, fr, ip, fmt.Sprintf("icmpv6: packet too big, mtu %d", mtu))
}
