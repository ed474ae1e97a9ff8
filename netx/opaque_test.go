package netx_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/latticelab/lattice/netx"
)

// opaqueNetwork is OS with every socket hidden behind the bare net
// interfaces, and with gVisor gonet's strictness about datagram
// addresses. It lets these tests drive the pion adapter the way a lab
// host does (no *net.UDPConn, no *net.TCPConn) without importing gVisor,
// which only netstack/ and lab/ may do.
type opaqueNetwork struct {
	// ifs, if set, replaces OS's interface list.
	ifs []netx.Interface
	// names, if set, makes the network a netx.Resolver over this table.
	names map[string][]netip.Addr
	// packetConns counts ListenPacket calls, to prove traffic went
	// through this Network.
	packetConns atomic.Int64
}

var _ netx.Network = (*opaqueNetwork)(nil)

func (o *opaqueNetwork) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := netx.OS.Dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return struct{ net.Conn }{c}, nil
}

func (o *opaqueNetwork) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	ln, err := netx.OS.Listen(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return opaqueListener{ln}, nil
}

func (o *opaqueNetwork) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	pc, err := netx.OS.ListenPacket(ctx, network, address)
	if err != nil {
		return nil, err
	}
	o.packetConns.Add(1)
	return strictPacketConn{pc}, nil
}

func (o *opaqueNetwork) Interfaces() ([]netx.Interface, error) {
	if o.ifs != nil {
		return o.ifs, nil
	}
	return netx.OS.Interfaces()
}

// resolvingNetwork is an opaqueNetwork that also implements netx.Resolver.
type resolvingNetwork struct {
	*opaqueNetwork
}

var _ netx.Resolver = resolvingNetwork{}

func (r resolvingNetwork) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if addrs, ok := r.names[host]; ok {
		return addrs, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

type opaqueListener struct {
	net.Listener
}

func (l opaqueListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return struct{ net.Conn }{c}, nil
}

// strictPacketConn exposes only net.PacketConn and, like gonet.UDPConn,
// accepts nothing but a *net.UDPAddr in WriteTo and reads the address
// family from the IP's length, so a 16-byte IPv4 address would go out as
// IPv6. Where gonet would panic or misroute, it returns an error.
type strictPacketConn struct {
	net.PacketConn
}

func (s strictPacketConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, fmt.Errorf("strict: WriteTo wants *net.UDPAddr, got %T", addr)
	}
	if len(ua.IP) == net.IPv6len && ua.IP.To4() != nil {
		return 0, fmt.Errorf("strict: 16-byte IPv4 address %s", ua.IP)
	}
	return s.PacketConn.WriteTo(b, addr)
}
