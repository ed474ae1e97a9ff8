package node

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/pion/ice/v4"
)

// listenUDP opens the socket ICE and WireGuard share. With no ListenAddr
// it is dual-stack ("udp" on [::], IPV6_V6ONLY off), so one port gathers
// host and server-reflexive candidates of both families: where both IPv4
// NATs are symmetric, IPv6 behind a stateful firewall still goes direct.
// A Network without IPv6 (a lab host with IPv4 addresses only, a kernel
// built without it) refuses [::]; the socket is then udp4, as before.
// Every address read from a dual-stack socket may be IPv4-mapped
// (::ffff:a.b.c.d); the mux and Bind unmap them before anyone sees them.
func (n *Node) listenUDP(ctx context.Context) (net.PacketConn, error) {
	port := strconv.Itoa(n.cfg.ListenPort)
	if la := n.cfg.ListenAddr; la.IsValid() {
		network := "udp"
		if la.Unmap().Is4() {
			network, la = "udp4", la.Unmap()
		}
		pc, err := n.cfg.Network.ListenPacket(ctx, network, net.JoinHostPort(la.String(), port))
		if err != nil {
			return nil, fmt.Errorf("node: UDP socket on %v: %w", la, err)
		}
		return pc, nil
	}
	pc, err := n.cfg.Network.ListenPacket(ctx, "udp", net.JoinHostPort("::", port))
	if err == nil {
		return pc, nil
	}
	pc, err4 := n.cfg.Network.ListenPacket(ctx, "udp4", net.JoinHostPort("", port))
	if err4 != nil {
		return nil, fmt.Errorf("node: UDP socket: %w (dual-stack: %w)", err4, err)
	}
	n.log.Debug("UDP socket is IPv4 only", "ipv6", err)
	return pc, nil
}

// socketNetworkTypes are the candidate families the socket pc can carry:
// both on a socket bound to [::], else its address's own.
func socketNetworkTypes(pc net.PacketConn) []ice.NetworkType {
	la := addrPortOf(pc.LocalAddr()).Addr()
	switch {
	case la.Is6() && la.IsUnspecified():
		return []ice.NetworkType{ice.NetworkTypeUDP4, ice.NetworkTypeUDP6}
	case la.Is6():
		return []ice.NetworkType{ice.NetworkTypeUDP6}
	}
	return []ice.NetworkType{ice.NetworkTypeUDP4}
}

// unmapAddrPort is ap with an IPv4-mapped address as plain IPv4.
func unmapAddrPort(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
