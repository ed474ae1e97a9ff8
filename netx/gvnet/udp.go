package gvnet

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// dialUDP opens a gVisor UDP socket connected to remote.
func (n *Network) dialUDP(network string, remote endpointAddr) (net.Conn, error) {
	var wq waiter.Queue
	ep, terr := n.cfg.Stack.NewEndpoint(udp.ProtocolNumber, remote.proto, &wq)
	if terr != nil {
		return nil, opError("dial", network, remote, terr)
	}
	if terr := ep.Connect(remote.full); terr != nil {
		ep.Close()
		return nil, opError("dial", network, remote, terr)
	}
	return &packetConn{UDPConn: gonet.NewUDPConn(&wq, ep), proto: remote.proto}, nil
}

// listenUDP opens a gVisor UDP socket bound to local.
func (n *Network) listenUDP(network string, local endpointAddr) (net.PacketConn, error) {
	var wq waiter.Queue
	ep, terr := n.cfg.Stack.NewEndpoint(udp.ProtocolNumber, local.proto, &wq)
	if terr != nil {
		return nil, opError("listen", network, local, terr)
	}
	if terr := ep.Bind(local.full); terr != nil {
		ep.Close()
		return nil, opError("listen", network, local, terr)
	}
	return &packetConn{UDPConn: gonet.NewUDPConn(&wq, ep), proto: local.proto, egress: n.cfg.Egress}, nil
}

// packetConn is a gonet UDP socket that accepts every net.Addr form package
// net's sockets accept in WriteTo, instead of panicking on anything but a
// *net.UDPAddr, sends to IPv4-mapped IPv6 addresses as IPv4, and names the
// unspecified address of its family as its local address when bound to
// every address.
type packetConn struct {
	*gonet.UDPConn
	proto  tcpip.NetworkProtocolNumber
	egress func(network string, dst netip.AddrPort) error

	// last is the destination egress last allowed, so a socket talking to
	// one peer asks once, not per datagram.
	last atomic.Pointer[netip.AddrPort]
}

// LocalAddr implements net.PacketConn.
func (c *packetConn) LocalAddr() net.Addr {
	a, ok := c.UDPConn.LocalAddr().(*net.UDPAddr)
	if ok && len(a.IP) == 0 {
		return &net.UDPAddr{IP: unspecifiedIP(c.proto), Port: a.Port}
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
