package fabric

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/latticelab/lattice/internal/inet"
	"github.com/latticelab/lattice/netx/gvnet"
)

// A host's UDP sockets are served by the fabric itself, not by its gVisor
// stack. UDP is the data path of everything Lattice measures (WireGuard,
// QUIC, STUN, ICE), and a datagram's trip through gVisor's socket layer
// costs several times what the rest of the fabric does; a lab whose hosts
// cost more than the code under test would measure itself. So sending a
// datagram here is: look up the route, write the Ethernet, IPv4 and UDP
// headers into a pooled frame, copy the payload, transmit. Receiving is:
// validate, find the socket by port, queue the frame. TCP and ICMP stay
// with gVisor, which owns every UDP datagram no socket here claims and so
// answers it with a port unreachable, as a real host does.
//
// Semantics follow Linux where a program could tell the difference: weak
// host model (any local address is accepted on any interface), ephemeral
// ports from 32768-60999, a datagram larger than the interface MTU fails
// with EMSGSIZE (a host does not fragment what it sends; routers fragment
// for smaller links, and a host reassembles what arrives in fragments, see
// reassembly.go), a full receive queue drops,
// a read with a small buffer truncates, WriteTo on a connected socket fails
// as it does in package net.

const (
	udpEphemeralMin, udpEphemeralMax = 32768, 60999
	// udpRecvQueueBytes bounds a socket's queued payload, like SO_RCVBUF.
	// Linux's default (net.core.rmem_default, 208 KiB) is tuned below what
	// WireGuard and QUIC ask for (they raise it to several MiB), so the lab
	// starts where those programs end up.
	udpRecvQueueBytes = 4 << 20
	udpMaxPayload     = 65507
	ipv4HeaderLen     = 20
	udpHeaderLen      = 8
	defaultTTL        = 64
)

// udpStack holds a host's UDP sockets.
type udpStack struct {
	h     *Host
	local map[netip.Addr]bool // the host's addresses, 127.0.0.1 included
	rnd   *seededRand
	ipID  atomic.Uint32

	mu     sync.RWMutex
	ports  map[uint16][]*udpConn
	closed bool

	// Counters, for tests and the lab report.
	badChecksum, queueFull, noNeighbor atomic.Uint64

	reasm reassembler // UDP datagrams arriving in fragments; see reassembly.go
	pmtu  pmtuCache   // path MTUs from ICMP fragmentation needed; see pmtu.go
}

func newUDPStack(h *Host, rnd *seededRand) *udpStack {
	u := &udpStack{h: h, rnd: rnd, ports: map[uint16][]*udpConn{}, local: map[netip.Addr]bool{loopbackAddr: true, loopback6: true}}
	for _, ifc := range h.ifcs {
		for _, a := range ifc.Addrs() {
			u.local[a] = true
		}
	}
	return u
}

var (
	loopbackAddr = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	loopback6    = netip.IPv6Loopback()
)

// loopbackFor returns the loopback address of a's family.
func loopbackFor(a netip.Addr) netip.Addr {
	if a.Is4() {
		return loopbackAddr
	}
	return loopback6
}

var _ gvnet.UDPBinder = (*udpStack)(nil)

// BindUDP implements gvnet.UDPBinder.
func (u *udpStack) BindUDP(op, network string, local, remote netip.AddrPort) (gvnet.UDPConn, error) {
	c, err := u.bind(op, network, local, remote)
	if err != nil {
		return nil, err // not a nil *udpConn in a non-nil interface
	}
	return c, nil
}

// bind creates a socket on local (unspecified address: every address; port
// 0: an ephemeral port) connected to remote if remote is valid.
func (u *udpStack) bind(op, network string, local, remote netip.AddrPort) (*udpConn, error) {
	fail := func(err error) (*udpConn, error) {
		return nil, &net.OpError{Op: op, Net: network, Source: udpAddrOrNil(local), Addr: udpAddrOrNil(remote), Err: err}
	}
	la := local.Addr()
	if !la.IsUnspecified() && !u.local[la] {
		return fail(fmt.Errorf("bind %v: %w", la, syscall.EADDRNOTAVAIL))
	}
	if remote.IsValid() {
		if remote.Port() == 0 || remote.Addr().IsUnspecified() {
			return fail(&net.AddrError{Err: "invalid remote address", Addr: remote.String()})
		}
		if la.IsUnspecified() {
			// connect(2) fixes the source address by route.
			src, err := u.sourceFor(remote.Addr())
			if err != nil {
				return fail(err)
			}
			la = src
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return fail(net.ErrClosed)
	}
	port := local.Port()
	if port == 0 {
		var ok bool
		if port, ok = u.ephemeralLocked(la); !ok {
			return fail(fmt.Errorf("no free ephemeral port: %w", syscall.EADDRINUSE))
		}
	} else if !u.freeLocked(la, port) {
		return fail(fmt.Errorf("bind %v: %w", netip.AddrPortFrom(la, port), syscall.EADDRINUSE))
	}
	c := &udpConn{
		u:      u,
		local:  netip.AddrPortFrom(la, port),
		remote: remote,
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
		limit:  udpRecvQueueBytes,
	}
	u.ports[port] = append(u.ports[port], c)
	return c, nil
}

// freeLocked reports whether addr:port may be bound: no socket holds the
// port on the same address or on the wildcard, as without SO_REUSEADDR.
func (u *udpStack) freeLocked(addr netip.Addr, port uint16) bool {
	for _, c := range u.ports[port] {
		if c.local.Addr() == addr || c.local.Addr().IsUnspecified() || addr.IsUnspecified() {
			return false
		}
	}
	return true
}

func (u *udpStack) ephemeralLocked(addr netip.Addr) (uint16, bool) {
	const n = udpEphemeralMax - udpEphemeralMin + 1
	start := int(u.rnd.Uint64() % n)
	for i := range n {
		p := uint16(udpEphemeralMin + (start+i)%n)
		if u.freeLocked(addr, p) {
			return p, true
		}
	}
	return 0, false
}

func (u *udpStack) unbind(c *udpConn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	list := u.ports[c.local.Port()]
	for i, o := range list {
		if o == c {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(u.ports, c.local.Port())
	} else {
		u.ports[c.local.Port()] = list
	}
}

func (u *udpStack) close() {
	u.mu.Lock()
	var all []*udpConn
	for _, l := range u.ports {
		all = append(all, l...)
	}
	u.closed = true
	u.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
}

// sourceFor returns the address a datagram to dst leaves from.
func (u *udpStack) sourceFor(dst netip.Addr) (netip.Addr, error) {
	if dst.IsLoopback() {
		return loopbackFor(dst), nil
	}
	if u.local[dst] {
		return dst, nil
	}
	rt := u.h.routes.lookup(dst)
	if rt == nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %w", dst, syscall.ENETUNREACH)
	}
	src := rt.ifc.addrFor(dst)
	if !src.IsValid() {
		return netip.Addr{}, fmt.Errorf("no address of %v's family on %s: %w", dst, rt.ifc, syscall.EADDRNOTAVAIL)
	}
	return src, nil
}

// familyOK reports whether a socket bound to local may send to dst: a
// socket on an IPv4 address (0.0.0.0 included) reaches IPv4 only, one on a
// specific IPv6 address IPv6 only, one on :: both (IPV6_V6ONLY off, Linux's
// default).
func familyOK(local, dst netip.Addr) bool {
	if local.Is4() {
		return dst.Is4()
	}
	return local.IsUnspecified() || dst.Is6()
}

// sendBatch transmits datagrams from src to dst in order, resolving the
// route once; what leaves through one interface goes as one run (batch.go).
// On an error the datagrams before the failing one have been sent.
func (u *udpStack) sendBatch(src, dst netip.AddrPort, payloads [][]byte) error {
	if len(payloads) > 0 && len(payloads[0]) > udpMaxPayload {
		return fmt.Errorf("%d-byte datagram: %w", len(payloads[0]), syscall.EMSGSIZE)
	}
	da := dst.Addr().Unmap()
	if !da.IsValid() || da.Zone() != "" || dst.Port() == 0 {
		return &net.AddrError{Err: "invalid destination", Addr: dst.String()}
	}
	if !familyOK(src.Addr(), da) {
		return fmt.Errorf("from %v to %v: %w", src.Addr(), da, syscall.EAFNOSUPPORT)
	}
	if da.IsUnspecified() {
		da = loopbackFor(da) // as on Linux, 0.0.0.0 and :: are this host
	}
	dst = netip.AddrPortFrom(da, dst.Port())
	hlen, et := ipv4HeaderLen, uint16(etherTypeIPv4)
	if da.Is6() {
		hlen, et = ipv6HeaderLen, etherTypeIPv6
	}
	if da.IsLoopback() || u.local[da] {
		if !src.Addr().IsUnspecified() && src.Addr().IsLoopback() != da.IsLoopback() {
			return fmt.Errorf("from %v to %v: %w", src.Addr(), da, syscall.EINVAL)
		}
		from := da
		if !src.Addr().IsUnspecified() {
			from = src.Addr()
		}
		for _, payload := range payloads {
			if len(payload) > udpMaxPayload {
				return fmt.Errorf("%d-byte datagram: %w", len(payload), syscall.EMSGSIZE)
			}
			f := getFrame(ethHeaderLen + hlen + udpHeaderLen + len(payload))
			writeEth(f, mac{}, mac{}, et)
			u.build(f, netip.AddrPortFrom(from, src.Port()), dst, payload)
			if !u.deliver(f) {
				putFrame(f) // nobody listening: a port unreachable nobody would see
			}
		}
		return nil
	}
	rt := u.h.routes.lookup(da)
	if rt == nil {
		return fmt.Errorf("no route to %v: %w", da, syscall.ENETUNREACH)
	}
	ifc := rt.ifc
	var out *[][]byte // frames of a batch, sent as one run; nil for one datagram
	if len(payloads) > 1 {
		out = txFrames.Get().(*[][]byte)
		defer func() {
			ifc.transmitFrames(out)
			txFrames.Put(out)
		}()
	}
	var nb *Interface
	pmtu := -1 // not looked up yet
	for i, payload := range payloads {
		if len(payload) > udpMaxPayload {
			return fmt.Errorf("%d-byte datagram: %w", len(payload), syscall.EMSGSIZE)
		}
		if n := hlen + udpHeaderLen + len(payload); n > ifc.mtu {
			return fmt.Errorf("%d-byte packet exceeds %s MTU %d: %w", n, ifc, ifc.mtu, syscall.EMSGSIZE)
		}
		if i == 0 {
			if src.Addr().IsUnspecified() {
				sa := ifc.addrFor(da)
				if !sa.IsValid() {
					return fmt.Errorf("no address of %v's family on %s: %w", da, ifc, syscall.EADDRNOTAVAIL)
				}
				src = netip.AddrPortFrom(sa, src.Port())
			}
			nh := rt.via
			if !nh.IsValid() {
				nh = da
			}
			if nb = ifc.network.neighbor(nh); nb == nil {
				// As after a failed ARP or neighbour discovery: the
				// datagrams are lost.
				u.noNeighbor.Add(uint64(len(payloads)))
				return nil
			}
		}
		f := getFrame(ethHeaderLen + hlen + udpHeaderLen + len(payload))
		writeEth(f, nb.mac, ifc.mac, et)
		u.build(f, src, dst, payload)
		if da.Is4() {
			if pmtu < 0 {
				pmtu = u.pmtu.get(da, u.h.f.clock)
			}
			if pmtu > 0 && len(f)-ethHeaderLen > pmtu {
				if out != nil {
					ifc.transmitFrames(out) // what went before leaves first
				}
				sendFragmented(ifc, f, pmtu)
				continue
			}
		}
		if out == nil {
			ifc.transmit(f)
			continue
		}
		*out = append(*out, f)
	}
	return nil
}

// build writes the IP (of dst's family) and UDP headers and the payload
// into f after its Ethernet header.
func (u *udpStack) build(f []byte, src, dst netip.AddrPort, payload []byte) {
	if dst.Addr().Is6() {
		u.build6(f, src, dst, payload)
		return
	}
	ip := header.IPv4(f[ethHeaderLen:])
	total := ipv4HeaderLen + udpHeaderLen + len(payload)
	// Field by field rather than with Encode, whose IPv4Fields (two
	// tcpip.Addresses, options) made building the headers 15% slower.
	ip[0], ip[1] = header.IPv4Version<<4|ipv4HeaderLen/4, 0
	ip.SetTotalLength(uint16(total))
	ip.SetID(uint16(u.ipID.Add(1)))
	ip.SetFlagsFragmentOffset(header.IPv4FlagDontFragment, 0) // path MTU discovery: see pmtu.go
	ip.SetTTL(defaultTTL)
	ip[9] = protoUDP // header.IPv4 has no protocol setter
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(ip.SourceAddressSlice(), s4[:])
	copy(ip.DestinationAddressSlice(), d4[:])
	inet.SetIPv4Checksum(ip)
	writeUDP(ip, ip[ipv4HeaderLen:total], src, dst, payload)
}

// writeUDP fills the UDP header and payload in udp (the whole datagram's
// bytes) of IP packet ip, whose addresses are written.
func writeUDP(ip, udpb []byte, src, dst netip.AddrPort, payload []byte) {
	udp := header.UDP(udpb)
	udp.SetSourcePort(src.Port())
	udp.SetDestinationPort(dst.Port())
	udp.SetLength(uint16(len(udp)))
	udp.SetChecksum(0)
	copy(udp[udpHeaderLen:], payload)
	sum := ^checksum.Checksum(udp, inet.PseudoHeaderSum(ip, protoUDP, len(udp)))
	if sum == 0 {
		sum = 0xffff // RFC 768: zero means "no checksum"
	}
	udp.SetChecksum(sum)
}

// deliver queues a received frame on the socket it is for and reports
// whether it took the frame; if not, the frame belongs to gVisor.
func (u *udpStack) deliver(f []byte) bool {
	if len(f) < ethHeaderLen+ipv4HeaderLen+udpHeaderLen {
		return false
	}
	var (
		ip       []byte
		hl       int // IP header length
		udp      header.UDP
		src, dst netip.Addr
	)
	switch binary.BigEndian.Uint16(f[12:14]) {
	case etherTypeIPv4:
		ip4 := header.IPv4(f[ethHeaderLen:])
		ihl := int(ip4.HeaderLength())
		if header.IPVersion(ip4) != header.IPv4Version || ip4.Protocol() != protoUDP || ihl < ipv4HeaderLen || ip4.More() || ip4.FragmentOffset() != 0 {
			return false // not UDP, or a fragment: gVisor's to handle or refuse
		}
		total := int(ip4.TotalLength())
		if total > len(ip4) || total < ihl+udpHeaderLen {
			return false
		}
		ip, hl, udp = ip4, ihl, header.UDP(ip4[ihl:total])
		src, dst = netip.AddrFrom4([4]byte(ip4.SourceAddressSlice())), netip.AddrFrom4([4]byte(ip4.DestinationAddressSlice()))
	case etherTypeIPv6:
		ip6, ok := udp6Packet(f[ethHeaderLen:])
		if !ok {
			return false // not UDP right after the header: gVisor's
		}
		ip, hl, udp = ip6, ipv6HeaderLen, header.UDP(ip6[ipv6HeaderLen:])
		src, dst = netip.AddrFrom16([16]byte(ip6[8:24])), netip.AddrFrom16([16]byte(ip6[24:40]))
	default:
		return false
	}
	ulen := int(udp.Length())
	if ulen < udpHeaderLen || ulen > len(udp) {
		return false
	}
	udp = udp[:ulen]
	dstAP := netip.AddrPortFrom(dst, udp.DestinationPort())
	srcAP := netip.AddrPortFrom(src, udp.SourcePort())
	u.mu.RLock()
	c := u.lookupLocked(dstAP, srcAP)
	u.mu.RUnlock()
	if c == nil {
		return false
	}
	if (udp.Checksum() != 0 || dst.Is6()) && checksum.Checksum(udp, inet.PseudoHeaderSum(ip, protoUDP, len(udp))) != 0xffff {
		u.badChecksum.Add(1) // RFC 8200 section 8.1: over IPv6 a zero checksum is no excuse
		putFrame(f)
		return true
	}
	off := ethHeaderLen + hl + udpHeaderLen
	if !c.push(f, off, ulen-udpHeaderLen, srcAP) {
		u.queueFull.Add(1)
		putFrame(f)
	}
	return true
}

// lookupLocked finds the socket for a datagram: a connected socket whose
// peer sent it beats one bound to the address, which beats the wildcard.
func (u *udpStack) lookupLocked(dst, src netip.AddrPort) *udpConn {
	var best *udpConn
	score := -1
	for _, c := range u.ports[dst.Port()] {
		s := 0
		switch {
		case c.local.Addr() == dst.Addr():
			s = 1
		case !c.local.Addr().IsUnspecified() || !familyOK(c.local.Addr(), dst.Addr()):
			continue
		}
		if c.remote.IsValid() {
			if c.remote != src {
				continue
			}
			s += 2
		}
		if s > score {
			best, score = c, s
		}
	}
	return best
}
