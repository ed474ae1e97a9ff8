// Package gvnet adapts a gVisor TCP/IP stack to netx.Network's dialing and
// listening: the one place where "host:port" strings become gVisor
// addresses and gVisor's tcpip.Error becomes the *net.OpError, with the
// syscall.Errno cause package net would report, that every netx.Network
// returns. Lab hosts (lab/fabric) and the pod netstack (netstack) each
// build their stack, NICs and routes, and wrap it in a Network; they add
// only what differs: their interface list and, in the lab, their own UDP
// sockets.
//
// netx itself stays free of gVisor; only this subpackage imports it.
package gvnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Config configures a Network. Stack is required; every other field's zero
// value works.
type Config struct {
	// Stack is the gVisor stack the Network opens sockets on. Required.
	// The Network does not own it: the caller closes it, after Close.
	Stack *stack.Stack

	// Name prefixes every error ("client: dial tcp ..."), to tell hosts
	// apart in a lab with many. If empty, errors are the bare
	// *net.OpError package net returns.
	Name string

	// IPv4Only refuses "tcp6", "udp6" and IPv6 literals, for a stack with
	// no IPv6 address. If false, both families.
	IPv4Only bool

	// PreferIPv6 picks IPv6 for "tcp" and "udp" when the host part names
	// no family (empty or "localhost"), for a stack whose routable address
	// is IPv6. If false, IPv4.
	PreferIPv6 bool

	// ErrClosed is what operations after Close wrap. If nil,
	// net.ErrClosed.
	ErrClosed error

	// Egress, if set, is asked before each Dial, and before each datagram
	// a ListenPacket socket of the gVisor stack sends to a new
	// destination; an error refuses the flow with a *net.OpError wrapping
	// it. It must be safe for concurrent use and fast.
	Egress func(network string, dst netip.AddrPort) error

	// UDP, if set, serves UDP sockets in place of the gVisor stack's.
	// Egress is then asked at Dial only: the binder's sockets do not ask
	// per destination. If nil, gVisor's UDP.
	UDP UDPBinder
}

// UDPBinder opens UDP sockets for a Network whose datagrams do not go
// through gVisor (the lab serves UDP itself; see lab/fabric/udp.go).
type UDPBinder interface {
	// BindUDP opens a socket on local (unspecified address: every local
	// address; port 0: an ephemeral port), connected to remote when
	// remote is valid. It is safe for concurrent use. On failure it
	// returns a *net.OpError with the given op and network.
	BindUDP(op, network string, local, remote netip.AddrPort) (UDPConn, error)
}

// UDPConn is a UDP socket: a net.PacketConn and, when connected, a
// net.Conn.
type UDPConn interface {
	net.Conn
	net.PacketConn
}

// Network dials and listens on a gVisor stack. It is safe for concurrent
// use. It has no Interfaces method: the stack's owner knows which of its
// NICs to show and how.
type Network struct {
	cfg    Config
	closed atomic.Bool
}

// New validates cfg and returns a Network on cfg.Stack.
func New(cfg Config) (*Network, error) {
	if cfg.Stack == nil {
		return nil, errors.New("gvnet: Config.Stack is required")
	}
	if cfg.ErrClosed == nil {
		cfg.ErrClosed = net.ErrClosed
	}
	return &Network{cfg: cfg}, nil
}

// Close makes every later Dial, Listen, ListenPacket and Ping fail with
// Config.ErrClosed. Sockets already open live until the stack closes. It
// is idempotent and returns nil.
func (n *Network) Close() error {
	n.closed.Store(true)
	return nil
}

func (n *Network) checkOpen(op, network string) error {
	if n.closed.Load() {
		return &net.OpError{Op: op, Net: network, Err: n.cfg.ErrClosed}
	}
	return nil
}

// named prefixes err with the Network's name, if it has one.
func (n *Network) named(err error) error {
	if err == nil || n.cfg.Name == "" {
		return err
	}
	return fmt.Errorf("%s: %w", n.cfg.Name, err)
}

// Dial implements netx.Network.
func (n *Network) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := n.dial(ctx, network, address)
	return c, n.named(err)
}

func (n *Network) dial(ctx context.Context, network, address string) (net.Conn, error) {
	if err := n.checkOpen("dial", network); err != nil {
		return nil, err
	}
	ea, err := n.parseAddr("dial", network, address)
	if err != nil {
		return nil, err
	}
	if ea.full.Addr.BitLen() == 0 {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.AddrError{Err: "no destination address", Addr: address}}
	}
	if err := n.checkEgress("dial", network, ea.addrPort()); err != nil {
		return nil, err
	}
	if isUDP(network) {
		if n.cfg.UDP != nil {
			return n.cfg.UDP.BindUDP("dial", network, netip.AddrPortFrom(unspecifiedAddr(ea.proto), 0), ea.addrPort())
		}
		return n.dialUDP(network, ea)
	}
	return n.dialTCP(ctx, network, endpointAddr{proto: ea.proto}, ea)
}

// Listen implements netx.Network.
func (n *Network) Listen(_ context.Context, network, address string) (net.Listener, error) {
	l, err := n.listen(network, address)
	return l, n.named(err)
}

// ListenPacket implements netx.Network.
func (n *Network) ListenPacket(_ context.Context, network, address string) (net.PacketConn, error) {
	c, err := n.listenPacket(network, address)
	return c, n.named(err)
}

func (n *Network) listenPacket(network, address string) (net.PacketConn, error) {
	if err := n.checkOpen("listen", network); err != nil {
		return nil, err
	}
	if !isUDP(network) {
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	ea, err := n.parseAddr("listen", network, address)
	if err != nil {
		return nil, err
	}
	if n.cfg.UDP != nil {
		return n.cfg.UDP.BindUDP("listen", network, ea.addrPort(), netip.AddrPort{})
	}
	return n.listenUDP(network, ea)
}

// checkEgress asks the egress hook about a flow to dst.
func (n *Network) checkEgress(op, network string, dst netip.AddrPort) error {
	if n.cfg.Egress == nil {
		return nil
	}
	if err := n.cfg.Egress(network[:3], dst); err != nil {
		return &net.OpError{Op: op, Net: network, Addr: netAddr(network, dst), Err: err}
	}
	return nil
}

func isTCP(network string) bool { return len(network) >= 3 && network[:3] == "tcp" }
func isUDP(network string) bool { return len(network) >= 3 && network[:3] == "udp" }

// netAddr is dst as the net.Addr of network's kind.
func netAddr(network string, dst netip.AddrPort) net.Addr {
	switch {
	case isUDP(network):
		return net.UDPAddrFromAddrPort(dst)
	case isTCP(network):
		return net.TCPAddrFromAddrPort(dst)
	}
	return &net.IPAddr{IP: dst.Addr().AsSlice()}
}
