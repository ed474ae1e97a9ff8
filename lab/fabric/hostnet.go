package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/latticelab/lattice/netx"
)

// listenBacklog is the accept queue of lab listeners; gonet's default of 10
// is too small for servers that many nodes connect to at once.
const listenBacklog = 1024

// parseHostAddr resolves "ip:port" (IP literal, "localhost" or empty host)
// into a gVisor address. The lab has no DNS.
func parseHostAddr(op, network, address string) (tcpip.FullAddress, error) {
	switch network {
	case "tcp", "tcp4", "udp", "udp4":
	default:
		return tcpip.FullAddress{}, &net.OpError{Op: op, Net: network, Err: net.UnknownNetworkError(network)}
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return tcpip.FullAddress{}, &net.OpError{Op: op, Net: network, Err: err}
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return tcpip.FullAddress{}, &net.OpError{Op: op, Net: network, Err: &net.AddrError{Err: "invalid port", Addr: address}}
	}
	fa := tcpip.FullAddress{Port: uint16(port)}
	switch host {
	case "":
	case "localhost":
		fa.Addr = tcpip.AddrFrom4([4]byte{127, 0, 0, 1})
	default:
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return tcpip.FullAddress{}, &net.OpError{Op: op, Net: network, Err: &net.AddrError{Err: "lab hosts take IP literals only (no DNS)", Addr: address}}
		}
		ip = ip.Unmap()
		if !ip.Is4() {
			return tcpip.FullAddress{}, &net.OpError{Op: op, Net: network, Err: &net.AddrError{Err: "lab hosts speak IPv4 only", Addr: address}}
		}
		if !ip.IsUnspecified() {
			fa.Addr = addrToTCPIP(ip)
		}
	}
	return fa, nil
}

func (h *Host) checkOpen(op, network string) error {
	if h.closed.Load() {
		return &net.OpError{Op: op, Net: network, Err: ErrClosed}
	}
	return nil
}

// Dial implements netx.Network.
func (h *Host) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if err := h.checkOpen("dial", network); err != nil {
		return nil, err
	}
	fa, err := parseHostAddr("dial", network, address)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(network, "udp") {
		c, err := h.udp.bind("dial", network, netip.AddrPortFrom(netip.IPv4Unspecified(), 0), fullToAddrPort(fa))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h.name, err)
		}
		return c, nil
	}
	c, err := gonet.DialContextTCP(ctx, h.stack, fa, ipv4.ProtocolNumber)
	if err != nil {
		var oe *net.OpError
		if !errors.As(err, &oe) {
			// A cancelled dial comes back as the bare context error; the
			// netx contract is a *net.OpError, as package net returns.
			err = &net.OpError{Op: "dial", Net: network, Addr: net.TCPAddrFromAddrPort(fullToAddrPort(fa)), Err: err}
		}
		return nil, fmt.Errorf("%s: dial %s %s: %w", h.name, network, address, err)
	}
	return c, nil
}

// DialTCPFrom connects from a chosen local address and port, as TCP hole
// punching needs (both sides dial each other's mapped address at once).
func (h *Host) DialTCPFrom(ctx context.Context, local, remote netip.AddrPort) (net.Conn, error) {
	if err := h.checkOpen("dial", "tcp"); err != nil {
		return nil, err
	}
	c, err := gonet.DialTCPWithBind(ctx, h.stack,
		tcpip.FullAddress{Addr: addrToTCPIP(local.Addr()), Port: local.Port()},
		tcpip.FullAddress{Addr: addrToTCPIP(remote.Addr()), Port: remote.Port()},
		ipv4.ProtocolNumber)
	if err != nil {
		return nil, fmt.Errorf("%s: dial tcp %v from %v: %w", h.name, remote, local, err)
	}
	return c, nil
}

// Listen implements netx.Network.
func (h *Host) Listen(_ context.Context, network, address string) (net.Listener, error) {
	if err := h.checkOpen("listen", network); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(network, "tcp") {
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	fa, err := parseHostAddr("listen", network, address)
	if err != nil {
		return nil, err
	}
	var wq waiter.Queue
	ep, terr := h.stack.NewEndpoint(tcp.ProtocolNumber, ipv4.ProtocolNumber, &wq)
	if terr != nil {
		return nil, h.opError("listen", network, address, terr)
	}
	ep.SocketOptions().SetReuseAddress(true)
	if terr := ep.Bind(fa); terr != nil {
		ep.Close()
		return nil, h.opError("listen", network, address, terr)
	}
	if terr := ep.Listen(listenBacklog); terr != nil {
		ep.Close()
		return nil, h.opError("listen", network, address, terr)
	}
	return &listener{TCPListener: gonet.NewTCPListener(h.stack, &wq, ep)}, nil
}

// ListenPacket implements netx.Network.
func (h *Host) ListenPacket(_ context.Context, network, address string) (net.PacketConn, error) {
	if err := h.checkOpen("listen", network); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(network, "udp") {
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	fa, err := parseHostAddr("listen", network, address)
	if err != nil {
		return nil, err
	}
	c, err := h.udp.bind("listen", network, fullToAddrPort(fa), netip.AddrPort{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.name, err)
	}
	return c, nil
}

// Interfaces implements netx.Network: loopback first, then one entry per
// fabric interface.
func (h *Host) Interfaces() ([]netx.Interface, error) {
	out := []netx.Interface{{
		Index: int(loopbackNIC), Name: "lo", MTU: 65536, Flags: net.FlagUp | net.FlagLoopback,
		Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")},
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
			out[len(out)-1].Addrs = append(out[len(out)-1].Addrs, netip.PrefixFrom(a, ifc.network.prefix.Bits()))
		}
	}
	return out, nil
}

func (h *Host) opError(op, network, address string, err tcpip.Error) error {
	oe := &net.OpError{Op: op, Net: network, Err: errors.New(err.String())}
	if ap, perr := netip.ParseAddrPort(address); perr == nil {
		oe.Addr = net.TCPAddrFromAddrPort(ap)
	}
	return fmt.Errorf("%s: %w", h.name, oe)
}

// Ping sends one ICMP echo request to dst and waits for the reply, returning
// the round-trip time. The context bounds the wait.
func (h *Host) Ping(ctx context.Context, dst netip.Addr) (time.Duration, error) {
	if err := h.checkOpen("ping", "icmp"); err != nil {
		return 0, err
	}
	var wq waiter.Queue
	ep, terr := h.stack.NewEndpoint(icmp.ProtocolNumber4, ipv4.ProtocolNumber, &wq)
	if terr != nil {
		return 0, h.opError("ping", "icmp", dst.String(), terr)
	}
	conn := gonet.NewUDPConn(&wq, ep)
	defer conn.Close()
	if terr := ep.Connect(tcpip.FullAddress{Addr: addrToTCPIP(dst)}); terr != nil {
		return 0, h.opError("ping", "icmp", dst.String(), terr)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	req := make([]byte, header.ICMPv4MinimumSize+8)
	icmpHdr := header.ICMPv4(req)
	icmpHdr.SetType(header.ICMPv4Echo)
	icmpHdr.SetSequence(1)
	binary.BigEndian.PutUint64(req[header.ICMPv4MinimumSize:], uint64(time.Now().UnixNano()))
	start := time.Now()
	if _, err := conn.Write(req); err != nil {
		return 0, fmt.Errorf("%s: ping %v: %w", h.name, dst, err)
	}
	buf := make([]byte, 1500)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return 0, fmt.Errorf("%s: ping %v: no reply: %w", h.name, dst, ctx.Err())
			}
			return 0, fmt.Errorf("%s: ping %v: %w", h.name, dst, err)
		}
		if n >= header.ICMPv4MinimumSize && header.ICMPv4(buf[:n]).Type() == header.ICMPv4EchoReply {
			return time.Since(start), nil
		}
	}
}

// fullToAddrPort converts a parsed address; an empty address is the IPv4
// wildcard.
func fullToAddrPort(fa tcpip.FullAddress) netip.AddrPort {
	a := netip.IPv4Unspecified()
	if fa.Addr.BitLen() != 0 {
		a = tcpipToAddr(fa.Addr)
	}
	return netip.AddrPortFrom(a, fa.Port)
}

// listener reports its address as package net does: 0.0.0.0:port for a
// wildcard bind (gonet reports ":port", which netip cannot parse).
type listener struct{ *gonet.TCPListener }

func (l *listener) Addr() net.Addr {
	a := l.TCPListener.Addr().(*net.TCPAddr)
	if a.IP == nil || a.IP.IsUnspecified() {
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(a.Port)))
	}
	return a
}
