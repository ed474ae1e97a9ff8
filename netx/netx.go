// Package netx defines Network, the one abstraction every Lattice component
// listens and dials on. Production code passes OS; the lab passes an emulated
// host whose sockets live on an in-process gVisor stack. Because control,
// relay, STUN and node code only ever see a Network, the very same code runs
// on real sockets and inside an emulated topology, in one process, without
// root.
//
// That is why no Lattice package calls net.Dial, net.Listen or
// net.ListenPacket itself: a single direct call would escape the emulated
// topology, bypass its NATs, impairments and packet captures, and make a
// scenario pass or fail for reasons the lab cannot see. Taking a Network also
// keeps tests hermetic: a test gets a fresh lab host instead of a port on the
// machine it happens to run on.
//
// Libraries that bring their own networking abstraction are adapted in one
// place: PionNet turns a Network into the transport.Net that pion/ice agents
// run on. The package netxtest holds the conformance suite every Network
// implementation must pass.
//
// Listening on an empty host ("", ":0") follows package net and binds every
// local address. Lattice components do not rely on that: when their Config
// leaves a listen address empty they default to 127.0.0.1 or refuse to start,
// so nothing is exposed beyond the host unless someone asks for it.
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
// every local address when listening. A Network that can resolve names says
// so by also implementing Resolver.
//
// Errors from Dial, Listen and ListenPacket should be, or wrap, a
// *net.OpError, so callers can inspect them with errors.As whichever
// Network they run on. Errors from the returned connections (deadlines,
// Close) follow package net: a deadline expiry is a net.Error whose Timeout
// reports true, and operations on a closed connection fail.
//
// The netxtest package checks these properties; every implementation runs it.
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
