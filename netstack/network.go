package netstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/latticelab/lattice/netx"
)

// listenBacklog is the accept queue of listeners: gonet's default of 10 is
// too small for a sandboxed server that many peers connect to at once.
const listenBacklog = 1024

// endpointAddr is a parsed "host:port" for one address family.
type endpointAddr struct {
	full  tcpip.FullAddress
	proto tcpip.NetworkProtocolNumber
}

// parseAddr resolves address for network ("tcp", "udp6", ...). The host is
// an IP literal, "localhost" or empty (every local address of the family);
// the family comes from the network's suffix, else from the host, else
// from the stack's overlay address.
func (s *Stack) parseAddr(op, network, address string) (endpointAddr, error) {
	var family byte // '4', '6' or 0 for either
	switch network {
	case "tcp", "udp":
	case "tcp4", "udp4":
		family = '4'
	case "tcp6", "udp6":
		family = '6'
	default:
		return endpointAddr{}, &net.OpError{Op: op, Net: network, Err: net.UnknownNetworkError(network)}
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return endpointAddr{}, &net.OpError{Op: op, Net: network, Err: err}
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return endpointAddr{}, &net.OpError{Op: op, Net: network, Err: &net.AddrError{Err: "invalid port", Addr: address}}
	}
	var ip netip.Addr
	switch host {
	case "":
	case "localhost":
		ip = netip.MustParseAddr("127.0.0.1")
		if family == '6' || family == 0 && s.addr.Addr().Is6() {
			ip = netip.IPv6Loopback()
		}
	default:
		ip, err = netip.ParseAddr(host)
		if err != nil {
			return endpointAddr{}, &net.OpError{Op: op, Net: network, Err: fmt.Errorf("%q: %w", host, netx.ErrNoResolver)}
		}
		ip = ip.Unmap().WithZone("")
	}
	if family == 0 {
		family = '4'
		if ip.IsValid() && ip.Is6() || !ip.IsValid() && s.addr.Addr().Is6() {
			family = '6'
		}
	}
	if ip.IsValid() && ip.Is4() != (family == '4') {
		return endpointAddr{}, &net.OpError{Op: op, Net: network, Err: &net.AddrError{Err: "address family mismatch", Addr: address}}
	}
	ea := endpointAddr{full: tcpip.FullAddress{Port: uint16(port)}, proto: ipv4.ProtocolNumber}
	if family == '6' {
		ea.proto = ipv6.ProtocolNumber
	}
	if ip.IsValid() && !ip.IsUnspecified() {
		ea.full.Addr = toTCPIP(ip)
	}
	return ea, nil
}

func (s *Stack) checkOpen(op, network string) error {
	if s.closed.Load() {
		return &net.OpError{Op: op, Net: network, Err: ErrClosed}
	}
	return nil
}

// opError converts a gVisor error, once, into the *net.OpError every
// netx.Network returns.
func opError(op, network string, addr tcpip.FullAddress, err tcpip.Error) error {
	oe := &net.OpError{Op: op, Net: network, Err: errnoOf(err)}
	if addr.Addr.BitLen() != 0 || addr.Port != 0 {
		a := netip.AddrPortFrom(fromTCPIP(addr.Addr), addr.Port)
		if network[:3] == "udp" {
			oe.Addr = net.UDPAddrFromAddrPort(a)
		} else {
			oe.Addr = net.TCPAddrFromAddrPort(a)
		}
	}
	return oe
}

// Dial implements netx.Network.
func (s *Stack) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if err := s.checkOpen("dial", network); err != nil {
		return nil, err
	}
	ea, err := s.parseAddr("dial", network, address)
	if err != nil {
		return nil, err
	}
	if ea.full.Addr.BitLen() == 0 {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.AddrError{Err: "no destination address", Addr: address}}
	}
	if err := s.checkEgress("dial", network, ea.full); err != nil {
		return nil, err
	}
	if network[:3] == "udp" {
		c, err := gonet.DialUDP(s.stack, nil, &ea.full, ea.proto)
		if err != nil {
			return nil, wrapDialError(network, err)
		}
		return &packetConn{UDPConn: c, proto: ea.proto}, nil
	}
	return s.dialTCP(ctx, network, ea)
}

// dialTCP connects like gonet.DialTCPWithBind, which flattens a failure
// into errors.New(err.String()); keeping the tcpip.Error lets opError say
// "refused" or "unreachable" in errno terms, as package net would.
func (s *Stack) dialTCP(ctx context.Context, network string, ea endpointAddr) (net.Conn, error) {
	var wq waiter.Queue
	ep, terr := s.stack.NewEndpoint(tcp.ProtocolNumber, ea.proto, &wq)
	if terr != nil {
		return nil, opError("dial", network, ea.full, terr)
	}
	entry, writable := waiter.NewChannelEntry(waiter.WritableEvents)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	terr = ep.Connect(ea.full)
	if _, ok := terr.(*tcpip.ErrConnectStarted); ok {
		select {
		case <-ctx.Done():
			// An ICMP error received meanwhile is the better answer, as
			// Linux reports a soft error rather than ETIMEDOUT.
			soft := ep.LastError()
			ep.Close()
			if soft != nil {
				return nil, opError("dial", network, ea.full, soft)
			}
			return nil, wrapDialError(network, ctx.Err())
		case <-writable:
		}
		terr = ep.LastError()
	}
	if terr != nil {
		ep.Close()
		return nil, opError("dial", network, ea.full, terr)
	}
	return gonet.NewTCPConn(&wq, ep), nil
}

// wrapDialError makes every dial failure a *net.OpError: gonet returns the
// context's error bare when a dial is cancelled.
func wrapDialError(network string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return fmt.Errorf("netstack: %w", err)
	}
	return &net.OpError{Op: "dial", Net: network, Err: err}
}

// Listen implements netx.Network.
func (s *Stack) Listen(_ context.Context, network, address string) (net.Listener, error) {
	if err := s.checkOpen("listen", network); err != nil {
		return nil, err
	}
	if len(network) < 3 || network[:3] != "tcp" {
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	ea, err := s.parseAddr("listen", network, address)
	if err != nil {
		return nil, err
	}
	var wq waiter.Queue
	ep, terr := s.stack.NewEndpoint(tcp.ProtocolNumber, ea.proto, &wq)
	if terr != nil {
		return nil, opError("listen", network, ea.full, terr)
	}
	ep.SocketOptions().SetReuseAddress(true)
	if terr := ep.Bind(ea.full); terr != nil {
		ep.Close()
		return nil, opError("listen", network, ea.full, terr)
	}
	if terr := ep.Listen(listenBacklog); terr != nil {
		ep.Close()
		return nil, opError("listen", network, ea.full, terr)
	}
	return &listener{TCPListener: gonet.NewTCPListener(s.stack, &wq, ep), proto: ea.proto}, nil
}

// listener is a gonet listener whose Addr names the unspecified address of
// its family, as package net's does, when it listens on every address.
type listener struct {
	*gonet.TCPListener
	proto tcpip.NetworkProtocolNumber
}

// Addr implements net.Listener.
func (l *listener) Addr() net.Addr {
	a, ok := l.TCPListener.Addr().(*net.TCPAddr)
	if ok && len(a.IP) == 0 {
		return &net.TCPAddr{IP: unspecified(l.proto), Port: a.Port}
	}
	return l.TCPListener.Addr()
}

func unspecified(proto tcpip.NetworkProtocolNumber) net.IP {
	if proto == ipv6.ProtocolNumber {
		return net.IPv6unspecified
	}
	return net.IPv4zero.To4()
}

// ListenPacket implements netx.Network.
func (s *Stack) ListenPacket(_ context.Context, network, address string) (net.PacketConn, error) {
	if err := s.checkOpen("listen", network); err != nil {
		return nil, err
	}
	if len(network) < 3 || network[:3] != "udp" {
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	ea, err := s.parseAddr("listen", network, address)
	if err != nil {
		return nil, err
	}
	c, err := gonet.DialUDP(s.stack, &ea.full, nil, ea.proto)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			return nil, fmt.Errorf("netstack: %w", err)
		}
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	return &packetConn{UDPConn: c, proto: ea.proto, egress: s.egress}, nil
}

// checkEgress asks the egress hook about a flow to dst.
func (s *Stack) checkEgress(op, network string, dst tcpip.FullAddress) error {
	if s.egress == nil {
		return nil
	}
	ap := netip.AddrPortFrom(fromTCPIP(dst.Addr), dst.Port)
	if err := s.egress(network[:3], ap); err != nil {
		addr := net.Addr(net.TCPAddrFromAddrPort(ap))
		if network[:3] == "udp" {
			addr = net.UDPAddrFromAddrPort(ap)
		}
		return &net.OpError{Op: op, Net: network, Addr: addr, Err: err}
	}
	return nil
}

// Interfaces implements netx.Network: loopback, then the overlay interface.
func (s *Stack) Interfaces() ([]netx.Interface, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("netstack: interfaces: %w", ErrClosed)
	}
	return []netx.Interface{
		{
			Index: int(loopbackNIC), Name: "lo", MTU: 65536, Flags: net.FlagUp | net.FlagLoopback | net.FlagRunning,
			Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128")},
		},
		{
			Index: int(overlayNIC), Name: InterfaceName, MTU: s.mtu,
			Flags: net.FlagUp | net.FlagPointToPoint | net.FlagRunning,
			Addrs: []netip.Prefix{s.addr},
		},
	}, nil
}

// packetConn is a gonet UDP socket that accepts every net.Addr form package
// net's sockets accept in WriteTo, instead of panicking on anything but a
// *net.UDPAddr, sends to IPv4-mapped IPv6 addresses as IPv4, and names the
// unspecified address of its family as its local address when bound to
// every address.
type packetConn struct {
	*gonet.UDPConn
	proto  tcpip.NetworkProtocolNumber
	egress EgressFunc

	// last is the destination egress last allowed, so a socket talking to
	// one peer asks once, not per datagram.
	last atomic.Pointer[netip.AddrPort]
}

// LocalAddr implements net.PacketConn.
func (c *packetConn) LocalAddr() net.Addr {
	a, ok := c.UDPConn.LocalAddr().(*net.UDPAddr)
	if ok && len(a.IP) == 0 {
		return &net.UDPAddr{IP: unspecified(c.proto), Port: a.Port}
	}
	return c.UDPConn.LocalAddr()
}

// WriteTo implements net.PacketConn.
func (c *packetConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	var ap netip.AddrPort
	switch a := addr.(type) {
	case *net.UDPAddr:
		if a == nil {
			return 0, &net.OpError{Op: "write", Net: "udp", Source: c.LocalAddr(), Err: errors.New("missing address")}
		}
		ap = a.AddrPort()
	case nil:
		return 0, &net.OpError{Op: "write", Net: "udp", Source: c.LocalAddr(), Err: errors.New("missing address")}
	default:
		var err error
		if ap, err = netip.ParseAddrPort(addr.String()); err != nil {
			return 0, &net.OpError{Op: "write", Net: "udp", Source: c.LocalAddr(), Addr: addr, Err: &net.AddrError{Err: "not a UDP address", Addr: addr.String()}}
		}
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
	if c.egress != nil {
		if last := c.last.Load(); last == nil || *last != ap {
			if err := c.egress("udp", ap); err != nil {
				return 0, &net.OpError{Op: "write", Net: "udp", Source: c.LocalAddr(), Addr: net.UDPAddrFromAddrPort(ap), Err: err}
			}
			c.last.Store(&ap)
		}
	}
	return c.UDPConn.WriteTo(b, net.UDPAddrFromAddrPort(ap))
}
