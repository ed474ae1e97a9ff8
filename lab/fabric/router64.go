package fabric

import (
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/latticelab/lattice/lab/nat"
)

// NAT64 (RFC 6146) on a router's uplink: IPv6 packets from inside to the
// NAT64 prefix leave translated to IPv4 from the uplink's address, and IPv4
// packets to that address come back in as IPv6 through the mappings they
// made. Translation changes a packet's size (the IPv6 header is 20 bytes
// longer), so it is written into a new frame. A packet whose translation
// would exceed the uplink's MTU is answered with Packet Too Big naming the
// IPv6 size that fits, as an IPv6 router would: the translated packet
// carries DF when over 1260 bytes and could not be fragmented later. An
// IPv4 packet with DF too big for the inside network once translated is
// answered with "fragmentation needed" naming that MTU - 20. Hairpinning
// (RFC 6146 section 3.8) needs nothing more: a packet to prefix+the NAT64's
// own address leaves translated to that address, and the uplink, its
// neighbour, hands it back in through the mapping it names.

// translate64 runs p through the router's NAT64 in dir into a new frame.
// It returns the new frame and its packet, or nil after counting the drop
// and releasing f; otherwise f is still the caller's.
func (r *Router) translate64(in *Interface, f, p []byte, dir nat.Direction) (fr, b []byte, note string) {
	fr = getFrame(ethHeaderLen + len(p) + 40) // room for the largest growth, an ICMP error's two headers
	b, res := r.nat64.Translate(r.now(in), fr[ethHeaderLen:ethHeaderLen], p, dir)
	if res.Verdict == nat.Drop {
		putFrame(fr)
		r.drop(in, f, &r.stats.nat, res.Reason)
		return nil, nil, ""
	}
	if &b[0] != &fr[ethHeaderLen] { // cannot happen with the room above; stay correct anyway
		fr = append(fr[:ethHeaderLen], b...)
		b = fr[ethHeaderLen:]
	}
	if res.Reason != "" {
		note = res.Reason
	}
	return fr[:ethHeaderLen+len(b)], b, note
}

// forward64 translates IPv6 packet p (in frame f, which it owns) from
// inside, addressed to the NAT64 prefix, and sends it on as IPv4.
func (r *Router) forward64(in *Interface, f, p []byte) {
	c := &r.stats
	dst := netip.AddrFrom4([4]byte(p[36:40]))
	rt := r.routes.lookup(dst)
	if rt == nil {
		r.drop(in, f, &c.noRoute, "nat64: no route to "+dst.String())
		return
	}
	out := rt.ifc
	if len(p)-20 > out.mtu {
		r.packetTooBig(in, p, out.mtu+20)
		r.drop(in, f, &c.tooBig, fmt.Sprintf("%d-byte ipv6 packet exceeds %s MTU %d once translated: answered packet too big, mtu %d", len(p), out, out.mtu, out.mtu+20))
		return
	}
	fr, b, note := r.translate64(in, f, p, nat.FromInside)
	if fr == nil {
		return
	}
	putFrame(f)
	r.output(in, out, rt, fr, b, note) // decrements the TTL translated from the hop limit
}

// inbound64 translates IPv4 packet p (in frame f, which it owns), arriving
// on the uplink for the NAT64's address, and sends it on as IPv6.
func (r *Router) inbound64(in *Interface, f, p []byte) {
	c := &r.stats
	fr, b, _ := r.translate64(in, f, p, nat.FromOutside)
	if fr == nil {
		return
	}
	dst := netip.AddrFrom16([16]byte(b[24:40]))
	rt := r.routes.lookup(dst)
	if rt == nil {
		putFrame(fr)
		r.drop(in, f, &c.noRoute, "nat64: no route to "+dst.String())
		return
	}
	out := rt.ifc
	if len(b) > out.mtu {
		// RFC 7915 section 4: the IPv4 sender learns the size that fits
		// once translated. Without DF it would be fragmented into IPv6
		// fragments, which this translator does not emit.
		putFrame(fr)
		if header.IPv4(p).Flags()&header.IPv4FlagDontFragment != 0 {
			r.fragNeeded(in, p, out.mtu-20)
			r.drop(in, f, &c.tooBig, fmt.Sprintf("nat64: %d-byte packet exceeds %s MTU %d once translated: answered fragmentation needed, mtu %d", len(p), out, out.mtu, out.mtu-20))
		} else {
			r.drop(in, f, &c.tooBig, fmt.Sprintf("nat64: %d-byte packet exceeds %s MTU %d once translated, and IPv6 fragments are not made", len(p), out, out.mtu))
		}
		return
	}
	putFrame(f)
	b[7]-- // the hop limit; input checked the TTL it came from
	r.output6(in, out, rt, fr, b, "")
}

// isEchoRequest4 reports an IPv4 ICMP echo request (not a later fragment).
func isEchoRequest4(p []byte) bool {
	ihl := int(p[0]&0xf) * 4
	return p[9] == protoICMP && len(p) > ihl && p[ihl] == 8 && p[6]&0x1f == 0 && p[7] == 0
}
