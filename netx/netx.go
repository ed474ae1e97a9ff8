// Package netx defines Network, the one abstraction every Lattice component
// listens and dials on. Production code passes OS; the lab passes an emulated
// host whose sockets live on an in-process gVisor stack. Because control,
// relay, STUN and node code only ever see a Network, the very same code runs
// on real sockets and inside an emulated topology, in one process, without
// root.
package netx

import (
	"context"
	"net"
	"net/netip"
)

// Network is a host's view of a network: it dials, listens and lists its
// interfaces. Implementations must be safe for concurrent use.
//
// Addresses are "host:port" strings as in package net. Implementations other
// than OS may accept only IP literals (no name resolution); an empty host means
// every local address when listening.
type Network interface {
	// Dial connects to address on the named network: "tcp", "tcp4",
	// "tcp6", "udp", "udp4" or "udp6". The context bounds connection
	// establishment only, not the life of the returned connection.
	Dial(ctx context.Context, network, address string) (net.Conn, error)

	// Listen announces a stream listener on the local address. network is
	// "tcp", "tcp4" or "tcp6". Port 0 picks a free port; Addr() reports it.
	Listen(ctx context.Context, network, address string) (net.Listener, error)

	// ListenPacket opens a datagram socket on the local address. network is
	// "udp", "udp4" or "udp6". Port 0 picks a free port.
	ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error)

	// Interfaces lists the host's network interfaces, loopback included,
	// each with the prefixes assigned to it.
	Interfaces() ([]Interface, error)
}

// Interface describes one network interface of a Network.
type Interface struct {
	// Index is positive and unique within the Network.
	Index int
	// Name is the interface name, e.g. "eth0" or "lo".
	Name string
	// MTU is the largest IP packet the interface sends, in bytes.
	MTU int
	// Flags carries net.FlagUp, net.FlagLoopback and friends.
	Flags net.Flags
	// HardwareAddr is empty for interfaces without a link-layer address.
	HardwareAddr net.HardwareAddr
	// Addrs are the interface's addresses with their prefix lengths.
	Addrs []netip.Prefix
}
