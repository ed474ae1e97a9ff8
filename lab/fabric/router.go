package fabric

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/latticelab/lattice/internal/inet"
	"github.com/latticelab/lattice/lab/nat"
)

// RouterConfig declares a router joining two or more networks.
type RouterConfig struct {
	// Name identifies the router. Required, unique among hosts and routers.
	Name string
	// Interfaces attach the router to its networks; at least one.
	Interfaces []InterfaceConfig
	// Gateway is the default route's next hop. If zero, no default route.
	Gateway netip.Addr
	// Gateway6 is the IPv6 default route's next hop. If zero, no IPv6
	// default route.
	Gateway6 netip.Addr
	// Routes are static routes besides the connected ones.
	Routes []Route
	// NAT, when set, translates every packet leaving through the uplink
	// and every packet arriving on it, with the RFC 4787 / RFC 5382
	// behaviour it describes (see nat.Profile for the common ones). Its
	// Public address is set to the uplink's address.
	NAT *nat.Config
	// Firewall filters packets leaving through the uplink on a router
	// without NAT (with NAT, use NAT.Firewall).
	Firewall *nat.Firewall
	// Stateful, when set, filters IPv6 on the uplink as an RFC 6092 home
	// router does: nothing translated, inbound only through state inside
	// hosts opened (see nat.FirewallProfile). IPv4 is the NAT's.
	Stateful *nat.StatefulConfig
	// NAT64, when set, translates IPv6 from inside addressed to its
	// prefix to IPv4 leaving through the uplink, and back (RFC 6146; see
	// router64.go). Its Public address is set to the uplink's IPv4
	// address. A router has NAT or NAT64, not both.
	NAT64 *nat.NAT64Config
	// Uplink names the outside interface for NAT and Firewall. If empty,
	// the interface on the Gateway's network.
	Uplink string
}

// Router forwards IPv4 and IPv6 (router6.go) between its networks: it validates each packet,
// decrements the TTL, routes by longest prefix, translates on its NAT uplink
// and answers pings to its own addresses. Malformed packets are counted and
// dropped, never trusted.
type Router struct {
	f      *Fabric
	name   string
	log    *slog.Logger
	ifcs   []*Interface
	routes routeTable
	uplink *Interface
	nat    *nat.NAT
	nat64  *nat.NAT64 // see router64.go
	fw     *nat.Firewall
	// stateful filters IPv6 on the uplink; see router6.go.
	stateful *nat.Stateful

	stats routerCounters
	once  sync.Once
}

// RouterStats counts what a router did with the packets it received.
type RouterStats struct {
	Forwarded  uint64 // packets sent on towards their destination
	Local      uint64 // packets addressed to the router itself (pings answered)
	Malformed  uint64 // failed header validation
	TTL        uint64 // TTL expired
	NoRoute    uint64 // no route to the destination
	NoNeighbor uint64 // next hop not present on the egress network
	TooBig     uint64 // larger than the egress MTU, DF set (answered "fragmentation needed") or not fragmentable
	Fragmented uint64 // packets larger than the egress MTU split into fragments
	ICMPSent   uint64 // ICMP errors the router sent (fragmentation needed)
	NAT        uint64 // dropped by the NAT: filtering, no mapping, table full, hairpin off
	Firewall   uint64 // dropped by a firewall rule
	Other      uint64 // unsupported protocols and packets for the router it ignores
}

type routerCounters struct {
	forwarded, local, malformed, ttl, noRoute, noNeighbor, tooBig, nat, firewall, other atomic.Uint64
	fragmented, icmpSent                                                                atomic.Uint64
}

// AddRouter adds a router and starts forwarding.
func (f *Fabric) AddRouter(cfg RouterConfig) (*Router, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	if err := f.nameFreeLocked("router", cfg.Name); err != nil {
		return nil, err
	}
	ifcs, err := f.buildInterfacesLocked(cfg.Name, cfg.Interfaces)
	if err != nil {
		return nil, err
	}
	r := &Router{f: f, name: cfg.Name, log: f.log.With("router", cfg.Name), ifcs: ifcs, fw: cfg.Firewall}
	fail := func(err error) (*Router, error) {
		for _, ifc := range ifcs {
			ifc.close()
		}
		return nil, err
	}
	if r.routes, err = buildRoutes(cfg.Name, ifcs, cfg.Gateway, cfg.Gateway6, cfg.Routes); err != nil {
		return fail(err)
	}
	if cfg.NAT != nil || cfg.NAT64 != nil || cfg.Firewall != nil || cfg.Stateful != nil || cfg.Uplink != "" {
		for _, ifc := range ifcs {
			if ifc.name == cfg.Uplink || (cfg.Uplink == "" && (cfg.Gateway.IsValid() && ifc.network.contains(cfg.Gateway) || !cfg.Gateway.IsValid() && cfg.Gateway6.IsValid() && ifc.network.contains(cfg.Gateway6))) {
				r.uplink = ifc
			}
		}
		if r.uplink == nil {
			if cfg.Uplink != "" {
				return fail(fmt.Errorf("%w: router %q: uplink %q is not one of its interfaces", ErrInvalid, cfg.Name, cfg.Uplink))
			}
			return fail(fmt.Errorf("%w: router %q: NAT or firewall needs an uplink: name one or set a gateway", ErrInvalid, cfg.Name))
		}
	}
	if cfg.Firewall != nil {
		if err := cfg.Firewall.Validate(); err != nil {
			return fail(fmt.Errorf("%w: router %q firewall: %w", ErrInvalid, cfg.Name, err))
		}
	}
	if cfg.Stateful != nil {
		if r.stateful, err = nat.NewStateful(*cfg.Stateful); err != nil {
			return fail(fmt.Errorf("%w: router %q ipv6 firewall: %w", ErrInvalid, cfg.Name, err))
		}
	}
	if cfg.NAT != nil {
		nc := *cfg.NAT
		nc.Public = r.uplink.addrFor(netip.IPv4Unspecified()) // NAT44: the uplink's IPv4 address
		if nc.Seed == 0 {
			nc.Seed = f.seedFor(cfg.Name + "/nat")
		}
		if r.nat, err = nat.New(nc); err != nil {
			return fail(fmt.Errorf("%w: router %q: %w", ErrInvalid, cfg.Name, err))
		}
	}
	if cfg.NAT64 != nil {
		if cfg.NAT != nil {
			return fail(fmt.Errorf("%w: router %q: NAT and NAT64 both set: a router translates one way", ErrInvalid, cfg.Name))
		}
		nc := *cfg.NAT64
		nc.Public = r.uplink.addrFor(netip.IPv4Unspecified())
		if !nc.Public.IsValid() {
			return fail(fmt.Errorf("%w: router %q: NAT64 needs an IPv4 address on uplink %s", ErrInvalid, cfg.Name, r.uplink))
		}
		if nc.Seed == 0 {
			nc.Seed = f.seedFor(cfg.Name + "/nat64")
		}
		if r.nat64, err = nat.NewNAT64(nc); err != nil {
			return fail(fmt.Errorf("%w: router %q: %w", ErrInvalid, cfg.Name, err))
		}
	}
	if err := f.checkRealmsLocked(cfg.Name, r); err != nil {
		return fail(err)
	}
	if err := f.checkLoopsLocked(r); err != nil {
		return fail(err)
	}
	if err := attachLocked(ifcs); err != nil {
		return fail(err)
	}
	for _, ifc := range ifcs {
		in := ifc
		in.handle = func(batch [][]byte) {
			in.tx.begin(f.clock.Now())
			for _, fr := range batch {
				r.input(in, fr)
			}
			in.tx.end()
		}
		in.start()
	}
	f.routers[cfg.Name] = r
	return r, nil
}

// Name returns the router's name.
func (r *Router) Name() string { return r.name }

// Interfaces returns the router's interfaces.
func (r *Router) Interfaces() []*Interface { return append([]*Interface(nil), r.ifcs...) }

// Interface returns the named interface or nil.
func (r *Router) Interface(name string) *Interface {
	for _, ifc := range r.ifcs {
		if ifc.name == name {
			return ifc
		}
	}
	return nil
}

// Stateful returns the router's IPv6 stateful filter, or nil.
func (r *Router) Stateful() *nat.Stateful { return r.stateful }

// Uplink returns the NAT/firewall uplink, or nil.
func (r *Router) Uplink() *Interface { return r.uplink }

// NAT64 returns the router's NAT64, or nil.
func (r *Router) NAT64() *nat.NAT64 { return r.nat64 }

// NAT returns the router's NAT, or nil. Use it to Reboot the NAT, list
// mappings or read its counters.
func (r *Router) NAT() *nat.NAT { return r.nat }

// Stats returns the router's counters.
func (r *Router) Stats() RouterStats {
	c := &r.stats
	return RouterStats{
		Forwarded: c.forwarded.Load(), Local: c.local.Load(), Malformed: c.malformed.Load(),
		TTL: c.ttl.Load(), NoRoute: c.noRoute.Load(), NoNeighbor: c.noNeighbor.Load(),
		TooBig: c.tooBig.Load(), NAT: c.nat.Load(), Firewall: c.firewall.Load(), Other: c.other.Load(),
		Fragmented: c.fragmented.Load(), ICMPSent: c.icmpSent.Load(),
	}
}

func (r *Router) close() {
	r.once.Do(func() {
		for _, ifc := range r.ifcs {
			ifc.close()
		}
	})
}

// drop releases a frame after recording why it went no further.
func (r *Router) drop(in *Interface, f []byte, counter *atomic.Uint64, reason string) {
	counter.Add(1)
	in.traceDrop(f, r.log, reason)
	putFrame(f)
}

// input handles one frame received on interface in. It owns f. This is the
// router's packet entry point; it must survive any bytes at all.
func (r *Router) input(in *Interface, f []byte) {
	c := &r.stats
	if len(f) < ethHeaderLen {
		r.drop(in, f, &c.malformed, "malformed: runt frame")
		return
	}
	if binary.BigEndian.Uint16(f[12:14]) == etherTypeIPv6 {
		r.input6(in, f)
		return
	}
	if binary.BigEndian.Uint16(f[12:14]) != etherTypeIPv4 {
		r.drop(in, f, &c.other, fmt.Sprintf("unsupported ethertype %#04x", binary.BigEndian.Uint16(f[12:14])))
		return
	}
	p, err := checkIPv4(f[ethHeaderLen:])
	if err != nil {
		r.drop(in, f, &c.malformed, err.Error())
		return
	}
	f = f[:ethHeaderLen+len(p)]
	if p[8] <= 1 {
		r.drop(in, f, &c.ttl, "ttl exceeded")
		return
	}
	if in == r.uplink && r.nat64 != nil && netip.AddrFrom4([4]byte(p[16:20])) == r.nat64.Public() && !isEchoRequest4(p) {
		r.inbound64(in, f, p)
		return
	}
	now := r.now(in)
	if in == r.uplink && r.nat != nil {
		if res := r.nat.Process(now, p, nat.FromOutside); res.Verdict == nat.Drop {
			r.drop(in, f, &c.nat, res.Reason)
			return
		}
	}
	dst := netip.AddrFrom4([4]byte(p[16:20]))
	if local := r.localIfc(dst); local != nil {
		if local == r.uplink && r.nat != nil && in != r.uplink {
			// Inside host addressing the NAT's public address: hairpin.
			res := r.nat.Process(now, p, nat.FromInside)
			if res.Verdict == nat.Drop {
				r.drop(in, f, &c.nat, res.Reason)
				return
			}
			dst = netip.AddrFrom4([4]byte(p[16:20]))
		} else {
			r.local(in, f, p)
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
		r.tooBig(in, out, rt, f, p) // before the NAT: an ICMP error goes to the real sender
		return
	}
	r.forward(in, out, rt, f, p)
}

// forward runs p (in frame f, which it owns) through the NAT or firewall
// of the way out, if any, and sends it.
func (r *Router) forward(in, out *Interface, rt *routeEntry, f, p []byte) {
	c := &r.stats
	now := r.now(in)
	var note string
	if out == r.uplink && in != r.uplink {
		if r.nat != nil {
			res := r.nat.Process(now, p, nat.FromInside)
			if res.Verdict == nat.Drop {
				counter := &c.nat
				if res.Firewall {
					counter = &c.firewall
				}
				r.drop(in, f, counter, res.Reason)
				return
			}
			if res.Reason != "" {
				// A new mapping: trace it like a drop is traced.
				note = "nat: " + res.Reason
				if r.log.Enabled(context.Background(), slog.LevelDebug) {
					r.log.Debug("nat", "mapping", res.Reason)
				}
			}
		} else if r.fw != nil {
			if ok, reason := r.fw.Check(nat.Proto(p[9]), dstPort(p)); !ok {
				r.drop(in, f, &c.firewall, reason)
				return
			}
		}
	}
	r.output(in, out, rt, f, p, note)
}

// output sends an already translated packet p (inside frame f) out of
// interface out along route rt.
func (r *Router) output(in, out *Interface, rt *routeEntry, f, p []byte, note string) {
	c := &r.stats
	if len(p) > out.mtu {
		r.drop(in, f, &c.tooBig, fmt.Sprintf("%d-byte packet exceeds %s MTU %d", len(p), out, out.mtu))
		return
	}
	nh := rt.via
	if !nh.IsValid() {
		nh = netip.AddrFrom4([4]byte(p[16:20]))
	}
	nb := out.network.neighbor(nh)
	if nb == nil {
		r.drop(in, f, &c.noNeighbor, fmt.Sprintf("no neighbour %v on %v", nh, out.network))
		return
	}
	decTTL(p)
	writeEth(f, nb.mac, out.mac, etherTypeIPv4)
	c.forwarded.Add(1)
	in.tx.add(out, f, note)
}

// now is the time of the batch being handled on in, else the clock's.
func (r *Router) now(in *Interface) time.Time {
	if in.tx.active {
		return in.tx.now
	}
	return r.f.clock.Now()
}

// localIfc returns the router interface owning dst, if any.
func (r *Router) localIfc(dst netip.Addr) *Interface {
	for _, ifc := range r.ifcs {
		if ifc.addr == dst {
			return ifc
		}
		for _, a := range ifc.aliases {
			if a == dst {
				return ifc
			}
		}
	}
	return nil
}

// local handles a packet addressed to the router: echo requests are
// answered, everything else is dropped.
func (r *Router) local(in *Interface, f, p []byte) {
	c := &r.stats
	ip := header.IPv4(p)
	ihl := int(ip.HeaderLength())
	if ip.Protocol() != protoICMP || len(p) < ihl+header.ICMPv4MinimumSize || ip.More() || ip.FragmentOffset() != 0 ||
		header.ICMPv4(ip[ihl:]).Type() != header.ICMPv4Echo || header.ICMPv4(ip[ihl:]).Code() != 0 {
		r.drop(in, f, &c.other, "addressed to the router: not an echo request")
		return
	}
	c.local.Add(1)
	// Echo reply: swap addresses, type 8 → 0, fresh TTL.
	src, dst := [4]byte(ip.SourceAddressSlice()), [4]byte(ip.DestinationAddressSlice())
	copy(ip.SourceAddressSlice(), dst[:])
	copy(ip.DestinationAddressSlice(), src[:])
	ip.SetTTL(defaultTTL)
	inet.SetIPv4Checksum(ip)
	icmp := header.ICMPv4(ip[ihl:])
	old := binary.BigEndian.Uint16(icmp) // type and code share a word
	icmp.SetType(header.ICMPv4EchoReply)
	icmp.SetChecksum(inet.Update(icmp.Checksum(), old, binary.BigEndian.Uint16(icmp)))
	back := netip.AddrFrom4(src)
	rt := r.routes.lookup(back)
	if rt == nil {
		r.drop(in, f, &c.noRoute, "no route back to "+back.String())
		return
	}
	if rt.ifc == r.uplink && r.nat != nil && in != r.uplink {
		r.drop(in, f, &c.other, "echo reply would leave through the NAT")
		return
	}
	ip.SetTTL(ip.TTL() + 1) // output decrements it
	inet.SetIPv4Checksum(ip)
	r.output(in, rt.ifc, rt, f, p, "")
}

// dstPort returns the destination address and, for TCP and UDP, port.
func dstPort(p []byte) netip.AddrPort {
	ip := header.IPv4(p)
	dst := netip.AddrFrom4([4]byte(ip.DestinationAddressSlice()))
	ihl := int(ip.HeaderLength())
	if (ip.Protocol() == protoTCP || ip.Protocol() == protoUDP) && len(p) >= ihl+4 && ip.FragmentOffset() == 0 {
		// The destination port opens both headers at the same offset.
		return netip.AddrPortFrom(dst, header.UDP(ip[ihl:]).DestinationPort())
	}
	return netip.AddrPortFrom(dst, 0)
}
