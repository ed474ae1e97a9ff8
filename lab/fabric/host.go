package fabric

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/loopback"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/netx/gvnet"
)

// HostConfig declares an in-process host: a gVisor network stack of its own,
// attached to one or more networks.
type HostConfig struct {
	// Name identifies the host. Required, unique among hosts and routers.
	Name string
	// Interfaces attach the host to its networks; at least one.
	Interfaces []InterfaceConfig
	// Gateway is the default route's next hop; it must be on one of the
	// host's networks. If zero, the host reaches only its own networks and
	// Routes.
	Gateway netip.Addr
	// Gateway6 is the IPv6 default route's next hop, on one of the host's
	// dual-stack or IPv6-only networks. If zero, no IPv6 default route.
	Gateway6 netip.Addr
	// Routes are static routes besides the connected ones, of either
	// family.
	Routes []Route
}

// Host is an emulated machine: its own gVisor TCP/IP stack (TCP, UDP, ICMP
// echo) with a loopback interface and one interface per attached network. It
// implements netx.Network, so any Lattice component can run on it.
type Host struct {
	f      *Fabric
	name   string
	log    *slog.Logger
	stack  *stack.Stack
	ifcs   []*Interface
	eps    []*endpoint
	routes routeTable
	udp    *udpStack
	net    *gvnet.Network
	once   sync.Once
}

var _ netx.Network = (*Host)(nil)

const (
	loopbackNIC tcpip.NICID = 1
	// TCP buffer sizes follow Linux's defaults (net.ipv4.tcp_rmem/wmem) so
	// throughput in the lab resembles throughput between real hosts.
	tcpRecvMin, tcpRecvDefault, tcpRecvMax = 4 << 10, 128 << 10, 6 << 20
	tcpSendMin, tcpSendDefault, tcpSendMax = 4 << 10, 16 << 10, 4 << 20
)

// AddHost adds a host and brings its stack up.
func (f *Fabric) AddHost(cfg HostConfig) (*Host, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	if err := f.nameFreeLocked("host", cfg.Name); err != nil {
		return nil, err
	}
	ifcs, err := f.buildInterfacesLocked(cfg.Name, cfg.Interfaces)
	if err != nil {
		return nil, err
	}
	h := &Host{f: f, name: cfg.Name, log: f.log.With("host", cfg.Name), ifcs: ifcs}
	fail := func(err error) (*Host, error) {
		if h.udp != nil {
			h.udp.close()
		}
		if h.stack != nil {
			h.stack.Close()
			h.stack.Wait()
		}
		for _, ifc := range ifcs {
			ifc.close()
		}
		return nil, err
	}
	routes, err := buildRoutes(cfg.Name, ifcs, cfg.Gateway, cfg.Gateway6, cfg.Routes)
	if err != nil {
		return fail(err)
	}
	h.routes = routes
	if err := h.buildStack(routes); err != nil {
		return fail(fmt.Errorf("host %q: %w", cfg.Name, err))
	}
	if err := attachLocked(ifcs); err != nil {
		return fail(err)
	}
	for _, ifc := range ifcs {
		ifc.start()
	}
	f.hosts[cfg.Name] = h
	return h, nil
}

func (h *Host) buildStack(routes routeTable) error {
	rnd := newSeededRand(h.f.seedFor("host/" + h.name))
	h.udp = newUDPStack(h, newSeededRand(h.f.seedFor("udp/"+h.name)))
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
		HandleLocal:        true,
		RandSource:         rnd,
		SecureRNG:          rnd,
	})
	h.stack = s
	has4, has6 := false, false
	for _, ifc := range h.ifcs {
		for _, a := range ifc.Addrs() {
			has4, has6 = has4 || a.Is4(), has6 || a.Is6()
		}
	}
	// A host with no IPv6 address speaks IPv4 only, as before IPv6; one
	// with no IPv4 address prefers IPv6 for "udp" and "tcp" with no host.
	n, err := gvnet.New(gvnet.Config{Stack: s, Name: h.name, IPv4Only: !has6, PreferIPv6: !has4, ErrClosed: ErrClosed, UDP: h.udp})
	if err != nil {
		return err
	}
	h.net = n
	opts := []tcpip.SettableTransportProtocolOption{
		new(tcpip.TCPSACKEnabled),
		&tcpip.TCPReceiveBufferSizeRangeOption{Min: tcpRecvMin, Default: tcpRecvDefault, Max: tcpRecvMax},
		&tcpip.TCPSendBufferSizeRangeOption{Min: tcpSendMin, Default: tcpSendDefault, Max: tcpSendMax},
		new(tcpip.TCPModerateReceiveBufferOption),
		// Classic SACK recovery (RFC 6675), not RACK, as the overlay's
		// stack (netstack) runs. On a link with no delay every round trip
		// takes no time in virtual time, so RACK's reorder window (a
		// quarter of the RTT) is zero: each ACK marks segments lost at the
		// instant it arrives, the retransmits meet more loss, and sender
		// and receiver ping-pong at one instant with no timer ever due,
		// holding the clock still (TestTCPLossAtZeroLatency).
		new(tcpip.TCPRecovery),
	}
	*opts[0].(*tcpip.TCPSACKEnabled) = true
	*opts[3].(*tcpip.TCPModerateReceiveBufferOption) = true
	for _, o := range opts {
		if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, o); err != nil {
			return fmt.Errorf("tcp option %T: %s", o, err)
		}
	}
	if err := s.CreateNICWithOptions(loopbackNIC, loopback.New(), stack.NICOptions{Name: "lo"}); err != nil {
		return fmt.Errorf("create lo: %s", err)
	}
	if err := s.AddProtocolAddress(loopbackNIC, tcpip.ProtocolAddress{
		Protocol:          ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4([4]byte{127, 0, 0, 1}), PrefixLen: 8},
	}, stack.AddressProperties{}); err != nil {
		return fmt.Errorf("lo address: %s", err)
	}
	if err := s.AddProtocolAddress(loopbackNIC, tcpip.ProtocolAddress{
		Protocol:          ipv6.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom16(netip.IPv6Loopback().As16()), PrefixLen: 128},
	}, stack.AddressProperties{}); err != nil {
		return fmt.Errorf("lo address ::1: %s", err)
	}
	var table []tcpip.Route
	table = append(table,
		tcpip.Route{Destination: mustSubnet(netip.MustParsePrefix("127.0.0.0/8")), NIC: loopbackNIC},
		tcpip.Route{Destination: mustSubnet(netip.MustParsePrefix("::1/128")), NIC: loopbackNIC})
	nicOf := map[*Interface]tcpip.NICID{}
	for i, ifc := range h.ifcs {
		id := tcpip.NICID(i + 2)
		nicOf[ifc] = id
		ep := newEndpoint(ifc, h.udp)
		h.eps = append(h.eps, ep)
		if err := s.CreateNICWithOptions(id, ep, stack.NICOptions{Name: ifc.name}); err != nil {
			return fmt.Errorf("create %s: %s", ifc.name, err)
		}
		for _, a := range ifc.Addrs() {
			proto := ipv4.ProtocolNumber
			if a.Is6() {
				proto = ipv6.ProtocolNumber // no DAD, MLD or router solicitation: ipv6.NewProtocol's defaults
			}
			if err := s.AddProtocolAddress(id, tcpip.ProtocolAddress{
				Protocol:          proto,
				AddressWithPrefix: tcpip.AddressWithPrefix{Address: gvnet.ToTCPIP(a), PrefixLen: ifc.network.prefixFor(a).Bits()},
			}, stack.AddressProperties{}); err != nil {
				return fmt.Errorf("address %v on %s: %s", a, ifc.name, err)
			}
		}
	}
	for _, rt := range routes {
		r := tcpip.Route{Destination: mustSubnet(rt.dst), NIC: nicOf[rt.ifc]}
		if rt.via.IsValid() {
			r.Gateway = gvnet.ToTCPIP(rt.via)
		}
		table = append(table, r)
	}
	s.SetRouteTable(table)
	return nil
}

func mustSubnet(p netip.Prefix) tcpip.Subnet {
	mask := net.CIDRMask(p.Bits(), p.Addr().BitLen())
	sn, err := tcpip.NewSubnet(gvnet.ToTCPIP(p.Masked().Addr()), tcpip.MaskFromBytes(mask))
	if err != nil {
		panic(fmt.Sprintf("fabric: subnet %v: %v", p, err)) // unreachable: p is validated and masked
	}
	return sn
}

// Name returns the host's name.
func (h *Host) Name() string { return h.name }

// Addr returns the address of the host's first interface.
func (h *Host) Addr() netip.Addr { return h.ifcs[0].addr }

// Interface returns the named interface or nil.
func (h *Host) Interface(name string) *Interface {
	for _, ifc := range h.ifcs {
		if ifc.name == name {
			return ifc
		}
	}
	return nil
}

// FabricInterfaces returns the host's fabric interfaces (not loopback).
func (h *Host) FabricInterfaces() []*Interface { return append([]*Interface(nil), h.ifcs...) }

// Stack returns the host's gVisor stack, for callers that need more than
// netx.Network offers.
func (h *Host) Stack() *stack.Stack { return h.stack }

func (h *Host) close() error {
	h.once.Do(func() {
		_ = h.net.Close()
		h.udp.close()
		h.stack.Close()
		h.stack.Wait()
		for _, ifc := range h.ifcs {
			ifc.close()
		}
	})
	return nil
}
