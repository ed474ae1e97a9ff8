package fabric

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/latticelab/lattice/netx"
)

// Dial implements netx.Network.
func (h *Host) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	return h.net.Dial(ctx, network, address)
}

// DialTCPFrom connects from a chosen local address and port, as TCP hole
// punching needs (both sides dial each other's mapped address at once).
func (h *Host) DialTCPFrom(ctx context.Context, local, remote netip.AddrPort) (net.Conn, error) {
	return h.net.DialTCP(ctx, local, remote)
}

// Listen implements netx.Network.
func (h *Host) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	return h.net.Listen(ctx, network, address)
}

// ListenPacket implements netx.Network.
func (h *Host) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	return h.net.ListenPacket(ctx, network, address)
}

// Ping sends one ICMP echo request to dst and waits for the reply, returning
// the round-trip time. The context bounds the wait.
func (h *Host) Ping(ctx context.Context, dst netip.Addr) (time.Duration, error) {
	return h.net.Ping(ctx, dst)
}

// Interfaces implements netx.Network: loopback first, then one entry per
// fabric interface.
func (h *Host) Interfaces() ([]netx.Interface, error) {
	out := []netx.Interface{{
		Index: int(loopbackNIC), Name: "lo", MTU: 65536, Flags: net.FlagUp | net.FlagLoopback,
		Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128")},
	}}
	for i, ifc := range h.ifcs {
		flags := net.FlagUp | net.FlagBroadcast | net.FlagMulticast
		if ifc.egress.Impairments().Down {
			flags &^= net.FlagUp
		}
		out = append(out, netx.Interface{
			Index: i + 2, Name: ifc.name, MTU: ifc.mtu, Flags: flags,
			HardwareAddr: append(net.HardwareAddr(nil), ifc.mac[:]...),
		})
		for _, a := range ifc.Addrs() {
			out[len(out)-1].Addrs = append(out[len(out)-1].Addrs, netip.PrefixFrom(a, ifc.network.prefixFor(a).Bits()))
		}
	}
	return out, nil
}
