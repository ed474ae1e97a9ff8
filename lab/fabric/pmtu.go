package fabric

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/latticelab/lattice/lab/clock"
)

// A host's UDP sockets keep path MTUs as Linux does for a socket in its
// default mode (IP_PMTUDISC_WANT): an ICMP "fragmentation needed" from a
// router lowers the path MTU to its destination for pmtuExpiry, and a
// later datagram larger than that leaves in fragments, DF clear, instead
// of being lost again. The datagram that drew the ICMP is lost, as on
// Linux; TCP's ICMP goes on to gVisor, which does its own.

// pmtuExpiry is Linux's net.ipv4.route.mtu_expires.
const pmtuExpiry = 10 * time.Minute

type pmtuEntry struct {
	mtu     int
	expires time.Time
}

// pmtuCache is one host's learnt path MTUs.
type pmtuCache struct {
	// size is len(m), so that a send to a host that has learnt nothing
	// (nearly every send) takes neither the lock nor the time.
	size atomic.Int64

	mu sync.Mutex // guards m
	m  map[netip.Addr]pmtuEntry
}

// note reads frame f and, if it is an ICMP fragmentation needed about a
// packet this host sent, records the path MTU it names. It never takes f.
func (c *pmtuCache) note(f []byte, now time.Time) {
	if len(f) < ethHeaderLen+ipv4HeaderLen+header.ICMPv4MinimumSize+ipv4HeaderLen || binary.BigEndian.Uint16(f[12:14]) != etherTypeIPv4 {
		return
	}
	ip := header.IPv4(f[ethHeaderLen:])
	ihl := int(ip.HeaderLength())
	if ip.Protocol() != protoICMP || ihl < ipv4HeaderLen || len(ip) < ihl+header.ICMPv4MinimumSize+ipv4HeaderLen || ip.FragmentOffset() != 0 {
		return
	}
	icmp := header.ICMPv4(ip[ihl:])
	if icmp.Type() != header.ICMPv4DstUnreachable || icmp.Code() != header.ICMPv4FragmentationNeeded {
		return
	}
	mtu := int(binary.BigEndian.Uint16(icmp[6:8]))
	if mtu < 576 { // RFC 1191 section 5: an old router names none; and no path is smaller
		return
	}
	inner := header.IPv4(icmp[header.ICMPv4MinimumSize:])
	dst := netip.AddrFrom4([4]byte(inner.DestinationAddressSlice()))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[netip.Addr]pmtuEntry{}
	}
	if e, ok := c.m[dst]; ok && now.Before(e.expires) && e.mtu <= mtu {
		return
	}
	if len(c.m) >= 4096 {
		for a, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, a)
			}
		}
		c.size.Store(int64(len(c.m)))
		if len(c.m) >= 4096 {
			return
		}
	}
	c.m[dst] = pmtuEntry{mtu: mtu, expires: now.Add(pmtuExpiry)}
	c.size.Store(int64(len(c.m)))
}

// get returns the path MTU learnt for dst, or 0; clk tells the time only
// when something was learnt.
func (c *pmtuCache) get(dst netip.Addr, clk clock.Clock) int {
	if c.size.Load() == 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[dst]
	if !ok {
		return 0
	}
	if !clk.Now().Before(e.expires) {
		delete(c.m, dst)
		c.size.Store(int64(len(c.m)))
		return 0
	}
	return e.mtu
}

// sendFragmented transmits the datagram in frame f (built, DF set) on ifc
// in fragments of at most mtu bytes, DF clear. It owns f.
func sendFragmented(ifc *Interface, f []byte, mtu int) {
	p := header.IPv4(f[ethHeaderLen:])
	p.SetFlagsFragmentOffset(0, 0)
	frags, err := fragmentIPv4(f[:ethHeaderLen], p, mtu)
	putFrame(f)
	if err != nil {
		return // a 20-byte header always fragments; mtu >= 576
	}
	for _, fr := range frags {
		ifc.transmit(fr)
	}
}

// icmpErrno is what an ICMP destination unreachable means to a connected
// UDP socket, as Linux maps it (icmp_err_convert), or 0 for codes it
// passes over.
func icmpErrno(code header.ICMPv4Code) syscall.Errno {
	switch code {
	case header.ICMPv4NetUnreachable:
		return syscall.ENETUNREACH
	case header.ICMPv4HostUnreachable, header.ICMPv4HostProhibited, header.ICMPv4AdminProhibited:
		return syscall.EHOSTUNREACH
	case header.ICMPv4PortUnreachable:
		return syscall.ECONNREFUSED
	case header.ICMPv4FragmentationNeeded:
		return syscall.EMSGSIZE
	}
	return 0
}

// noteICMPError hands an ICMP destination unreachable about a datagram a
// connected socket here sent to that socket, whose next read or write
// returns it (ECONNREFUSED for a closed port), as on Linux. Unconnected
// sockets hear nothing, also as on Linux without IP_RECVERR. It never
// takes f.
func (u *udpStack) noteICMPError(f []byte) {
	if len(f) < ethHeaderLen+ipv4HeaderLen+header.ICMPv4MinimumSize+ipv4HeaderLen+udpHeaderLen || binary.BigEndian.Uint16(f[12:14]) != etherTypeIPv4 {
		return
	}
	ip := header.IPv4(f[ethHeaderLen:])
	ihl := int(ip.HeaderLength())
	if ip.Protocol() != protoICMP || ihl != ipv4HeaderLen || ip.FragmentOffset() != 0 || ip.More() {
		return
	}
	icmp := header.ICMPv4(ip[ihl:])
	if icmp.Type() != header.ICMPv4DstUnreachable {
		return
	}
	errno := icmpErrno(icmp.Code())
	inner := header.IPv4(icmp[header.ICMPv4MinimumSize:])
	iihl := int(inner.HeaderLength())
	if errno == 0 || inner.Protocol() != protoUDP || iihl < ipv4HeaderLen || len(inner) < iihl+udpHeaderLen {
		return
	}
	udp := header.UDP(inner[iihl:])
	local := netip.AddrPortFrom(netip.AddrFrom4([4]byte(inner.SourceAddressSlice())), udp.SourcePort())
	remote := netip.AddrPortFrom(netip.AddrFrom4([4]byte(inner.DestinationAddressSlice())), udp.DestinationPort())
	u.mu.RLock()
	var c *udpConn
	for _, s := range u.ports[local.Port()] {
		if s.remote == remote {
			c = s
		}
	}
	u.mu.RUnlock()
	if c != nil {
		c.setError(errno)
	}
}
