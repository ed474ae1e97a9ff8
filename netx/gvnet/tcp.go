package gvnet

import (
	"context"
	"net"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// listenBacklog is the accept queue of listeners: gonet's default of 10 is
// too small for a server that many peers connect to at once.
const listenBacklog = 1024

// DialTCP connects from a chosen local address and port, as TCP hole
// punching needs (both sides dial each other's mapped address at once).
// local and remote must be of one family.
func (n *Network) DialTCP(ctx context.Context, local, remote netip.AddrPort) (net.Conn, error) {
	if err := n.checkOpen("dial", "tcp"); err != nil {
		return nil, n.named(err)
	}
	la, ra := endpointOf(local), endpointOf(remote)
	if local.Addr().Is4() != remote.Addr().Is4() {
		return nil, n.named(&net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(remote),
			Err: &net.AddrError{Err: "address family mismatch", Addr: local.String()}})
	}
	c, err := n.dialTCP(ctx, "tcp", la, ra)
	return c, n.named(err)
}

func endpointOf(ap netip.AddrPort) endpointAddr {
	a := ap.Addr().Unmap()
	ea := endpointAddr{full: tcpip.FullAddress{Port: ap.Port()}, proto: ipv4.ProtocolNumber}
	if a.Is6() {
		ea.proto = ipv6.ProtocolNumber
	}
	if a.IsValid() && !a.IsUnspecified() {
		ea.full.Addr = ToTCPIP(a)
	}
	return ea
}

// dialTCP connects like gonet.DialTCPWithBind, which flattens a failure
// into errors.New(err.String()); keeping the tcpip.Error lets opError say
// "refused" or "unreachable" in errno terms, as package net would. A zero
// local binds nothing.
func (n *Network) dialTCP(ctx context.Context, network string, local, remote endpointAddr) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Addr: netAddr(network, remote.addrPort()), Err: err}
	}
	var wq waiter.Queue
	ep, terr := n.cfg.Stack.NewEndpoint(tcp.ProtocolNumber, remote.proto, &wq)
	if terr != nil {
		return nil, opError("dial", network, remote, terr)
	}
	entry, writable := waiter.NewChannelEntry(waiter.WritableEvents)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	if local.full != (tcpip.FullAddress{}) {
		if terr := ep.Bind(local.full); terr != nil {
			ep.Close()
			return nil, opError("dial", network, local, terr)
		}
	}
	terr = ep.Connect(remote.full)
	if _, ok := terr.(*tcpip.ErrConnectStarted); ok {
		select {
		case <-ctx.Done():
			// An ICMP error received meanwhile is the better answer, as
			// Linux reports a soft error rather than ETIMEDOUT.
			soft := ep.LastError()
			ep.Close()
			if soft != nil {
				return nil, opError("dial", network, remote, soft)
			}
			return nil, &net.OpError{Op: "dial", Net: network, Addr: netAddr(network, remote.addrPort()), Err: ctx.Err()}
		case <-writable:
		}
		terr = ep.LastError()
	}
	if terr != nil {
		ep.Close()
		return nil, opError("dial", network, remote, terr)
	}
	return gonet.NewTCPConn(&wq, ep), nil
}

func (n *Network) listen(network, address string) (net.Listener, error) {
	if err := n.checkOpen("listen", network); err != nil {
		return nil, err
	}
	if !isTCP(network) {
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	ea, err := n.parseAddr("listen", network, address)
	if err != nil {
		return nil, err
	}
	var wq waiter.Queue
	ep, terr := n.cfg.Stack.NewEndpoint(tcp.ProtocolNumber, ea.proto, &wq)
	if terr != nil {
		return nil, opError("listen", network, ea, terr)
	}
	ep.SocketOptions().SetReuseAddress(true)
	if terr := ep.Bind(ea.full); terr != nil {
		ep.Close()
		return nil, opError("listen", network, ea, terr)
	}
	if terr := ep.Listen(listenBacklog); terr != nil {
		ep.Close()
		return nil, opError("listen", network, ea, terr)
	}
	return &listener{TCPListener: gonet.NewTCPListener(n.cfg.Stack, &wq, ep), proto: ea.proto}, nil
}

// listener is a gonet listener whose Addr names the unspecified address of
// its family, as package net's does, when it listens on every address
// (gonet reports ":port", which netip cannot parse).
type listener struct {
	*gonet.TCPListener
	proto tcpip.NetworkProtocolNumber
}

// Addr implements net.Listener.
func (l *listener) Addr() net.Addr {
	a, ok := l.TCPListener.Addr().(*net.TCPAddr)
	if ok && len(a.IP) == 0 {
		return &net.TCPAddr{IP: unspecifiedIP(l.proto), Port: a.Port}
	}
	return l.TCPListener.Addr()
}
