package fabric

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/latticelab/lattice/internal/inet"
)

// Routers and IPv4 packets larger than the next link's MTU (RFC 791,
// RFC 1191): with DF clear the router fragments the packet, each fragment
// then crossing the NAT on its own (lab/nat translates them); with DF set
// it drops the packet and answers ICMP "fragmentation needed" (type 3
// code 4) with the next hop's MTU, which the sender's path MTU discovery
// uses. A link impairment's mtu drops silently instead: a PMTU black hole.

// tooBig handles a packet p (in frame f, which it owns) bigger than out's
// MTU, on its way from in along rt.
func (r *Router) tooBig(in, out *Interface, rt *routeEntry, f, p []byte) {
	c := &r.stats
	ip := header.IPv4(p)
	if ip.Flags()&header.IPv4FlagDontFragment != 0 {
		r.fragNeeded(in, p, out.mtu)
		r.drop(in, f, &c.tooBig, fmt.Sprintf("%d-byte packet with DF exceeds %s MTU %d: answered fragmentation needed", len(p), out, out.mtu))
		return
	}
	frags, err := fragmentIPv4(f[:ethHeaderLen], p, out.mtu)
	if err != nil {
		r.drop(in, f, &c.tooBig, fmt.Sprintf("%d-byte packet exceeds %s MTU %d: %v", len(p), out, out.mtu, err))
		return
	}
	putFrame(f)
	c.fragmented.Add(1)
	for _, ff := range frags {
		r.forward(in, out, rt, ff, ff[ethHeaderLen:])
	}
}

// fragmentIPv4 splits p into frames (eth header copied from eth) of IPv4
// fragments of at most mtu bytes each (inet.FragmentIPv4), from the frame
// pool.
func fragmentIPv4(eth, p []byte, mtu int) ([][]byte, error) {
	frags, err := inet.FragmentIPv4(p, mtu, ethHeaderLen, getFrame)
	for _, f := range frags {
		copy(f, eth)
	}
	return frags, err
}

// fragNeeded answers p's sender with ICMP "fragmentation needed and DF
// set" naming mtu, from the router's address on in (RFC 1191 section 4).
func (r *Router) fragNeeded(in *Interface, p []byte, mtu int) {
	orig := header.IPv4(p)
	if orig.Protocol() == protoICMP && len(p) > int(orig.HeaderLength()) && !isEchoICMP(p[orig.HeaderLength()]) {
		return // never an ICMP error about an ICMP error (RFC 1122 3.2.2)
	}
	src := netip.AddrFrom4([4]byte(orig.SourceAddressSlice()))
	rt := r.routes.lookup(src)
	if rt == nil {
		return
	}
	quote := p[:min(len(p), int(orig.HeaderLength())+8)]
	n := header.IPv4MinimumSize + header.ICMPv4MinimumSize + len(quote)
	fr := getFrame(ethHeaderLen + n)
	ip := header.IPv4(fr[ethHeaderLen:])
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(n), TTL: defaultTTL + 1, // output decrements it
		Protocol: protoICMP, SrcAddr: tcpip.AddrFrom4(in.addr.As4()), DstAddr: tcpip.AddrFrom4(src.As4()),
	})
	inet.SetIPv4Checksum(ip)
	icmp := header.ICMPv4(ip[header.IPv4MinimumSize:])
	clear(icmp[:header.ICMPv4MinimumSize])
	icmp.SetType(header.ICMPv4DstUnreachable)
	icmp.SetCode(header.ICMPv4FragmentationNeeded)
	binary.BigEndian.PutUint16(icmp[6:8], uint16(mtu)) // next-hop MTU
	copy(icmp[header.ICMPv4MinimumSize:], quote)
	icmp.SetChecksum(inet.Checksum(icmp))
	r.stats.icmpSent.Add(1)
	r.output(in, rt.ifc, rt, fr, ip, "icmp: fragmentation needed, mtu "+fmt.Sprint(mtu))
}

// isEchoICMP reports whether an ICMP type is a query, not an error.
func isEchoICMP(typ byte) bool {
	return typ == byte(header.ICMPv4Echo) || typ == byte(header.ICMPv4EchoReply)
}
