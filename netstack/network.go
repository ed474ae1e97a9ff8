package netstack

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/latticelab/lattice/netx"
)

// Dial implements netx.Network.
func (s *Stack) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	return s.net.Dial(ctx, network, address)
}

// Listen implements netx.Network.
func (s *Stack) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	return s.net.Listen(ctx, network, address)
}

// ListenPacket implements netx.Network.
func (s *Stack) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	return s.net.ListenPacket(ctx, network, address)
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
