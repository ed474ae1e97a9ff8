package fabric

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
)

// NetworkConfig declares a network segment: one broadcast domain with a CIDR.
type NetworkConfig struct {
	// Name identifies the network in errors, logs and captures. Required.
	Name string
	// Prefix is the segment's IPv4 CIDR, e.g. 192.168.1.0/24. Required
	// unless Prefix6 is set (an IPv6-only segment).
	Prefix netip.Prefix
	// Prefix6 is the segment's IPv6 prefix, e.g. 2001:db8:1::/64, on a
	// dual-stack or IPv6-only segment. If zero, the segment is IPv4 only.
	Prefix6 netip.Prefix
	// MTU is the default MTU of interfaces attached here. If zero, 1500.
	MTU int
}

// Network is a segment: every interface attached to it can reach every other
// one in a single hop. It switches frames by their destination MAC.
type Network struct {
	f      *Fabric
	name   string
	prefix netip.Prefix // IPv4; invalid on an IPv6-only segment
	// prefix6 is the IPv6 prefix; invalid on an IPv4-only segment.
	prefix6 netip.Prefix
	mtu     int
	index   uint16

	mu sync.Mutex // serialises attach; readers use the atomic snapshots below
	// ports and byAddr are copy-on-write snapshots so the per-packet lookups
	// take no lock.
	ports  atomic.Pointer[[]*Interface] // index = port number in the MAC
	byAddr atomic.Pointer[map[netip.Addr]*Interface]

	tap   atomic.Pointer[tap]
	notes notes // capture comments for frames still in an egress pipe

	unknownDst atomic.Uint64 // frames for a MAC that no port owns
}

// Name returns the network's name.
func (n *Network) Name() string { return n.name }

// Prefix returns the network's IPv4 CIDR, invalid on an IPv6-only network.
func (n *Network) Prefix() netip.Prefix { return n.prefix }

// Prefix6 returns the network's IPv6 prefix, invalid on an IPv4-only
// network.
func (n *Network) Prefix6() netip.Prefix { return n.prefix6 }

// prefixFor returns the network's prefix of a's family (invalid if it has
// none).
func (n *Network) prefixFor(a netip.Addr) netip.Prefix {
	if a.Is4() {
		return n.prefix
	}
	return n.prefix6
}

// contains reports whether a is on the segment, in either family.
func (n *Network) contains(a netip.Addr) bool {
	p := n.prefixFor(a)
	return p.IsValid() && p.Contains(a)
}

// overlaps reports whether n and o share addresses in either family.
func (n *Network) overlaps(o *Network) bool {
	return n.prefix.IsValid() && o.prefix.IsValid() && n.prefix.Overlaps(o.prefix) ||
		n.prefix6.IsValid() && o.prefix6.IsValid() && n.prefix6.Overlaps(o.prefix6)
}

// MTU returns the default MTU of the network's interfaces.
func (n *Network) MTU() int { return n.mtu }

// Interfaces returns the interfaces attached to the network.
func (n *Network) Interfaces() []*Interface {
	p := n.ports.Load()
	if p == nil {
		return nil
	}
	return append([]*Interface(nil), (*p)...)
}

// neighbor returns the interface owning addr on this segment, or nil.
func (n *Network) neighbor(addr netip.Addr) *Interface {
	m := n.byAddr.Load()
	if m == nil {
		return nil
	}
	return (*m)[addr]
}

// attach reserves addr and a port for ifc. Called with the fabric lock held.
func (n *Network) attach(ifc *Interface) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range ifc.Addrs() {
		if other := n.neighbor(a); other != nil {
			return fmt.Errorf("%w: %s: address %v on %v is already used by %s", ErrInvalid, ifc, a, n, other)
		}
	}
	var ports []*Interface
	if p := n.ports.Load(); p != nil {
		ports = append(ports, (*p)...)
	}
	if len(ports) >= 1<<16 {
		return fmt.Errorf("%w: network %q is full (65536 interfaces)", ErrInvalid, n.name)
	}
	ifc.port = uint16(len(ports))
	ifc.mac = makeMAC(n.index, ifc.port)
	ports = append(ports, ifc)
	byAddr := make(map[netip.Addr]*Interface, len(ports))
	for _, p := range ports {
		for _, a := range p.Addrs() {
			byAddr[a] = p
		}
	}
	n.ports.Store(&ports)
	n.byAddr.Store(&byAddr)
	return nil
}

// switchFrame delivers a frame that left an interface's egress pipe to the
// port its destination MAC names. It is the egress pipes' Deliver callback.
func (n *Network) switchFrame(f []byte) {
	if in := n.f.inst; in != nil && len(f) >= ethHeaderLen &&
		in.frame(instantFrame{net: n.index, stage: stageSwitch, port: uint16(f[10])<<8 | uint16(f[11]), f: f, n: n}) {
		return // switched at the end of the instant, in order (instant.go)
	}
	n.deliverSwitch(f)
}

// deliverSwitch is switchFrame's capture and switching.
func (n *Network) deliverSwitch(f []byte) {
	note := n.notes.take(f)
	if t := n.tap.Load(); t != nil {
		t.write(f, dirNone, note)
	}
	dst := n.portFor(f)
	if dst == nil {
		n.unknownDst.Add(1)
		putFrame(f)
		return
	}
	dst.ingress.Send(f)
}

func (n *Network) portFor(f []byte) *Interface {
	if len(f) < ethHeaderLen || f[0] != 0x02 || f[1] != 0x4c {
		return nil
	}
	if uint16(f[2])<<8|uint16(f[3]) != n.index {
		return nil
	}
	port := int(uint16(f[4])<<8 | uint16(f[5]))
	p := n.ports.Load()
	if p == nil || port >= len(*p) {
		return nil
	}
	return (*p)[port]
}

func (n *Network) String() string {
	switch {
	case !n.prefix6.IsValid():
		return fmt.Sprintf("network %q (%v)", n.name, n.prefix)
	case !n.prefix.IsValid():
		return fmt.Sprintf("network %q (%v)", n.name, n.prefix6)
	}
	return fmt.Sprintf("network %q (%v, %v)", n.name, n.prefix, n.prefix6)
}
