package netx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/pion/transport/v5"
)

// PionNet adapts n to the transport.Net that pion/ice (and pion/turn,
// pion/stun) take through their WithNet options, so an ICE agent gathers,
// checks and sends on n: real sockets for OS, the emulated fabric for a lab
// host.
//
// The adapter has no state of its own and starts no goroutines; it is safe
// for concurrent use when n is. Semantics differ from pion's stdnet in a
// few deliberate ways:
//
//   - Every UDP socket is wrapped (see ListenUDP) so OS and lab hosts behave
//     the same. The wrapper hides the file descriptor, which turns off
//     pion's ECN reporting on OS sockets; nothing in Lattice uses it.
//   - Resolve*Addr parse IP literals without any lookup and resolve names
//     only through n's Resolver, failing with ErrNoResolver otherwise.
//     Ports must be numeric.
//   - Methods without a context (Dial, DialUDP, DialTCP, Listen*) use
//     context.Background; a dialer from CreateDialer honours its Timeout
//     and Deadline.
//   - A TCP dial cannot bind a local address, because Network has no such
//     operation; asking for one fails with errors.ErrUnsupported.
//   - Only UDP and TCP networks are supported; pion uses nothing else.
//   - Interfaces are read from n on every call, so address changes on a
//     lab host are seen at the next gathering.
func PionNet(n Network) (transport.Net, error) {
	if n == nil {
		return nil, errors.New("netx: pion net: nil network")
	}
	return &pionNet{n: n}, nil
}

type pionNet struct {
	n Network
}

var _ transport.Net = (*pionNet)(nil)

// ListenPacket implements transport.Net.
func (p *pionNet) ListenPacket(network, address string) (net.PacketConn, error) {
	pc, err := p.n.ListenPacket(context.Background(), network, address)
	if err != nil {
		return nil, err
	}
	return newUDPConn(pc), nil
}

// ListenUDP implements transport.Net. The returned socket wraps whatever
// net.PacketConn n hands out (a gVisor gonet.UDPConn on a lab host).
func (p *pionNet) ListenUDP(network string, laddr *net.UDPAddr) (transport.UDPConn, error) {
	if !isPacket(network) {
		return nil, unknownNetwork("listen", network)
	}
	pc, err := p.n.ListenPacket(context.Background(), network, listenAddr(laddr))
	if err != nil {
		return nil, err
	}
	return newUDPConn(pc), nil
}

// ListenTCP implements transport.Net.
func (p *pionNet) ListenTCP(network string, laddr *net.TCPAddr) (transport.TCPListener, error) {
	if !isStream(network) {
		return nil, unknownNetwork("listen", network)
	}
	l, err := p.n.Listen(context.Background(), network, listenAddr(laddr))
	if err != nil {
		return nil, err
	}
	return &tcpListener{Listener: l}, nil
}

// Dial implements transport.Net.
func (p *pionNet) Dial(network, address string) (net.Conn, error) {
	return p.n.Dial(context.Background(), network, address)
}

// DialUDP implements transport.Net.
//
// Without a local address (or with the wildcard and port 0) it dials
// through n, so the host picks the source address and filters replies as
// a connected socket does. With a local address it listens there and
// returns a wrapper that writes only to raddr and drops datagrams from
// anyone else, because Network cannot bind a dialing socket.
func (p *pionNet) DialUDP(network string, laddr, raddr *net.UDPAddr) (transport.UDPConn, error) {
	if !isPacket(network) {
		return nil, unknownNetwork("dial", network)
	}
	if raddr == nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errMissingAddress}
	}
	remote := addrPortOf(raddr)
	if isAnyAddr(laddr) {
		c, err := p.n.Dial(context.Background(), network, remote.String())
		if err != nil {
			return nil, err
		}
		uc, err := newDialedUDPConn(c)
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("netx: dial %s %s: %w", network, remote, err)
		}
		return uc, nil
	}
	pc, err := p.n.ListenPacket(context.Background(), network, listenAddr(laddr))
	if err != nil {
		return nil, err
	}
	return newFilteredUDPConn(pc, raddr), nil
}

// DialTCP implements transport.Net.
func (p *pionNet) DialTCP(network string, laddr, raddr *net.TCPAddr) (transport.TCPConn, error) {
	if !isStream(network) {
		return nil, unknownNetwork("dial", network)
	}
	if raddr == nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errMissingAddress}
	}
	if !isAnyAddr(laddr) {
		return nil, fmt.Errorf("netx: dial %s from %s: binding the local address: %w", network, laddr, errors.ErrUnsupported)
	}
	c, err := p.n.Dial(context.Background(), network, addrPortOf(raddr).String())
	if err != nil {
		return nil, err
	}
	return newTCPConn(c), nil
}

// ResolveIPAddr implements transport.Net. network is "ip", "ip4" or "ip6",
// optionally followed by ":protocol"; the protocol is ignored.
func (p *pionNet) ResolveIPAddr(network, address string) (*net.IPAddr, error) {
	afnet, _, _ := strings.Cut(network, ":")
	switch afnet {
	case "ip", "ip4", "ip6":
	default:
		return nil, net.UnknownNetworkError(network)
	}
	ip, err := resolveIP(context.Background(), p.n, afnet, address)
	if err != nil {
		return nil, err
	}
	return &net.IPAddr{IP: ipOf(ip), Zone: ip.Zone()}, nil
}

// ResolveUDPAddr implements transport.Net.
func (p *pionNet) ResolveUDPAddr(network, address string) (*net.UDPAddr, error) {
	if !isPacket(network) {
		return nil, net.UnknownNetworkError(network)
	}
	ip, port, err := resolveHostPort(context.Background(), p.n, network, address)
	if err != nil {
		return nil, err
	}
	return &net.UDPAddr{IP: ipOf(ip), Port: port, Zone: ip.Zone()}, nil
}

// ResolveTCPAddr implements transport.Net.
func (p *pionNet) ResolveTCPAddr(network, address string) (*net.TCPAddr, error) {
	if !isStream(network) {
		return nil, net.UnknownNetworkError(network)
	}
	ip, port, err := resolveHostPort(context.Background(), p.n, network, address)
	if err != nil {
		return nil, err
	}
	return &net.TCPAddr{IP: ipOf(ip), Port: port, Zone: ip.Zone()}, nil
}

// Interfaces implements transport.Net.
func (p *pionNet) Interfaces() ([]*transport.Interface, error) {
	ifs, err := p.n.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]*transport.Interface, 0, len(ifs))
	for _, ifc := range ifs {
		out = append(out, PionInterface(ifc))
	}
	return out, nil
}

// InterfaceByIndex implements transport.Net.
func (p *pionNet) InterfaceByIndex(index int) (*transport.Interface, error) {
	return p.findInterface(func(ifc Interface) bool { return ifc.Index == index }, fmt.Sprintf("index %d", index))
}

// InterfaceByName implements transport.Net.
func (p *pionNet) InterfaceByName(name string) (*transport.Interface, error) {
	return p.findInterface(func(ifc Interface) bool { return ifc.Name == name }, name)
}

func (p *pionNet) findInterface(match func(Interface) bool, what string) (*transport.Interface, error) {
	ifs, err := p.n.Interfaces()
	if err != nil {
		return nil, err
	}
	for _, ifc := range ifs {
		if match(ifc) {
			return PionInterface(ifc), nil
		}
	}
	return nil, fmt.Errorf("netx: interface %s: %w", what, transport.ErrInterfaceNotFound)
}

// CreateDialer implements transport.Net. The dialer honours d.Timeout and
// d.Deadline; d.LocalAddr is accepted only if it names no particular
// address. Other fields (KeepAlive, Control, Resolver) do not apply to a
// Network and are ignored.
func (p *pionNet) CreateDialer(d *net.Dialer) transport.Dialer {
	if d == nil {
		d = &net.Dialer{}
	}
	return &pionDialer{n: p.n, d: d}
}

// CreateListenConfig implements transport.Net. Fields of lc (Control,
// KeepAlive) do not apply to a Network and are ignored.
func (p *pionNet) CreateListenConfig(*net.ListenConfig) transport.ListenConfig {
	return pionListenConfig{n: p.n}
}

type pionDialer struct {
	n Network
	d *net.Dialer
}

// Dial implements transport.Dialer.
func (d *pionDialer) Dial(network, address string) (net.Conn, error) {
	if la := d.d.LocalAddr; la != nil && !isAnyAddr(la) {
		return nil, fmt.Errorf("netx: dial %s from %s: binding the local address: %w", network, la, errors.ErrUnsupported)
	}
	ctx := context.Background()
	var cancel context.CancelFunc = func() {}
	if !d.d.Deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, d.d.Deadline)
	}
	defer cancel()
	if d.d.Timeout > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(ctx, d.d.Timeout)
		defer cancelTimeout()
	}
	return d.n.Dial(ctx, network, address)
}

type pionListenConfig struct {
	n Network
}

// Listen implements transport.ListenConfig.
func (l pionListenConfig) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	return l.n.Listen(ctx, network, address)
}

// ListenPacket implements transport.ListenConfig.
func (l pionListenConfig) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	pc, err := l.n.ListenPacket(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return newUDPConn(pc), nil
}

// PionInterface converts ifc to pion's representation, with each prefix
// as a *net.IPNet (from which pion derives candidate addresses and, for
// IPv6 link-local ones, the zone).
func PionInterface(ifc Interface) *transport.Interface {
	out := transport.NewInterface(net.Interface{
		Index:        ifc.Index,
		MTU:          ifc.MTU,
		Name:         ifc.Name,
		HardwareAddr: ifc.HardwareAddr,
		Flags:        ifc.Flags,
	})
	for _, pfx := range ifc.Addrs {
		if !pfx.IsValid() {
			continue
		}
		a := pfx.Addr().Unmap()
		bits := pfx.Bits()
		if pfx.Addr().Is4In6() {
			bits -= 96
		}
		if bits < 0 {
			continue
		}
		out.AddAddress(&net.IPNet{IP: ipOf(a), Mask: net.CIDRMask(bits, a.BitLen())})
	}
	return out
}

// addrPortOf converts a *net.UDPAddr or *net.TCPAddr (possibly nil) to an
// AddrPort; a nil or empty IP gives the invalid Addr.
func addrPortOf(a net.Addr) netip.AddrPort {
	var (
		ip   net.IP
		port int
		zone string
	)
	switch a := a.(type) {
	case *net.UDPAddr:
		if a == nil {
			return netip.AddrPort{}
		}
		ip, port, zone = a.IP, a.Port, a.Zone
	case *net.TCPAddr:
		if a == nil {
			return netip.AddrPort{}
		}
		ip, port, zone = a.IP, a.Port, a.Zone
	default:
		return netip.AddrPort{}
	}
	addr, _ := netip.AddrFromSlice(ip)
	if addr.IsValid() {
		addr = addr.Unmap()
		if zone != "" && addr.Is6() {
			addr = addr.WithZone(zone)
		}
	}
	return netip.AddrPortFrom(addr, uint16(port)) //nolint:gosec // ports from package net fit in 16 bits
}

// listenAddr renders a (possibly nil) *net.UDPAddr or *net.TCPAddr as a
// listen address. A nil or empty IP becomes an empty host, which means
// every local address as in package net.
func listenAddr(a net.Addr) string {
	ap := addrPortOf(a)
	if ap.Addr().IsValid() {
		return ap.String()
	}
	return ":" + strconv.Itoa(int(ap.Port()))
}

// isAnyAddr reports whether a names no particular local address: nil, or
// the wildcard with port 0.
func isAnyAddr(a net.Addr) bool {
	ap := addrPortOf(a)
	return ap.Port() == 0 && (!ap.Addr().IsValid() || ap.Addr().IsUnspecified())
}
