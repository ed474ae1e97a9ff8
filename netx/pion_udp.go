package netx

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/pion/transport/v5"
)

// udpConn presents any net.PacketConn as a transport.UDPConn. A lab host's
// PacketConn is a gVisor gonet.UDPConn, which has none of the UDP-specific
// methods pion calls, and which panics on a WriteTo address that is not a
// *net.UDPAddr; udpConn supplies the former through ReadFrom/WriteTo and
// normalises addresses on the way in and out.
//
// With raddr set it behaves like a connected socket: Write sends to raddr,
// WriteTo with an address fails with net.ErrWriteToConnected, and reads
// drop datagrams from any other source.
//
// It holds no state besides the two fields, so it is as safe for
// concurrent use as the PacketConn it wraps.
type udpConn struct {
	pc     net.PacketConn
	raddr  *net.UDPAddr   // nil unless connected
	peer   netip.AddrPort // raddr, for comparisons
	filter bool           // drop datagrams not from peer
}

var (
	_ transport.UDPConn = (*udpConn)(nil)
	_ net.PacketConn    = (*udpConn)(nil)
	_ net.Conn          = (*udpConn)(nil)
	_ syscall.Conn      = (*udpConn)(nil)
)

// newUDPConn wraps an unconnected socket.
func newUDPConn(pc net.PacketConn) *udpConn {
	return &udpConn{pc: pc}
}

// newFilteredUDPConn wraps an unconnected socket so that it acts as if
// connected to raddr.
func newFilteredUDPConn(pc net.PacketConn, raddr *net.UDPAddr) *udpConn {
	peer := addrPortOf(raddr)
	return &udpConn{pc: pc, raddr: net.UDPAddrFromAddrPort(peer), peer: peer, filter: true}
}

// newDialedUDPConn wraps a socket that Network.Dial connected; the host
// already filters its traffic, and its RemoteAddr is the real peer.
func newDialedUDPConn(c net.Conn) (*udpConn, error) {
	ra, err := toUDPAddr(c.RemoteAddr())
	if err != nil {
		return nil, err
	}
	return &udpConn{pc: dialedPacketConn{c}, raddr: ra, peer: addrPortOf(ra)}, nil
}

// Close closes the underlying PacketConn, unblocking pending reads.
func (c *udpConn) Close() error { return c.pc.Close() }

// LocalAddr returns the bound address as a *net.UDPAddr, the type pion
// reads candidate ports from.
func (c *udpConn) LocalAddr() net.Addr {
	la := c.pc.LocalAddr()
	if ua, err := toUDPAddr(la); err == nil {
		return ua
	}
	return la
}

// RemoteAddr returns the connected peer, or nil.
func (c *udpConn) RemoteAddr() net.Addr {
	if c.raddr == nil {
		return nil // an untyped nil, not a nil *net.UDPAddr
	}
	return c.raddr
}

func (c *udpConn) SetDeadline(t time.Time) error      { return c.pc.SetDeadline(t) }
func (c *udpConn) SetReadDeadline(t time.Time) error  { return c.pc.SetReadDeadline(t) }
func (c *udpConn) SetWriteDeadline(t time.Time) error { return c.pc.SetWriteDeadline(t) }

// SetReadBuffer sets the receive buffer when the underlying socket has
// one to size; a user-space stack sizes its own buffers, so elsewhere it
// does nothing.
func (c *udpConn) SetReadBuffer(bytes int) error {
	if s, ok := underlying(c.pc).(interface{ SetReadBuffer(int) error }); ok {
		return s.SetReadBuffer(bytes)
	}
	return nil
}

// SetWriteBuffer is SetReadBuffer's counterpart for the send buffer.
func (c *udpConn) SetWriteBuffer(bytes int) error {
	if s, ok := underlying(c.pc).(interface{ SetWriteBuffer(int) error }); ok {
		return s.SetWriteBuffer(bytes)
	}
	return nil
}

// SyscallConn always fails: handing out the descriptor would let callers
// bypass the wrapper (and its peer filter), and lab sockets have none.
func (c *udpConn) SyscallConn() (syscall.RawConn, error) {
	return nil, fmt.Errorf("netx: udp syscall conn: %w", errors.ErrUnsupported)
}

// Read reads the payload of the next datagram (from the peer, if
// connected).
func (c *udpConn) Read(b []byte) (int, error) {
	n, _, err := c.ReadFromUDP(b)
	return n, err
}

// ReadFrom implements net.PacketConn.
func (c *udpConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, addr, err := c.ReadFromUDP(b)
	if addr == nil {
		return n, nil, err
	}
	return n, addr, err
}

// ReadFromUDP reads the next datagram and reports its source.
func (c *udpConn) ReadFromUDP(b []byte) (int, *net.UDPAddr, error) {
	for {
		n, addr, err := c.pc.ReadFrom(b)
		if err != nil {
			return n, nil, err
		}
		ua, cerr := toUDPAddr(addr)
		if cerr != nil {
			return n, nil, c.opError("read", addr, cerr)
		}
		if c.filter && addrPortOf(ua) != c.peer {
			continue // a connected socket never sees strangers
		}
		return n, ua, nil
	}
}

// ReadMsgUDP reads like ReadFromUDP. Control messages are not available
// through a net.PacketConn, so oobn and flags are always zero.
func (c *udpConn) ReadMsgUDP(b, _ []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	n, addr, err = c.ReadFromUDP(b)
	return n, 0, 0, addr, err
}

// Write sends b to the connected peer.
func (c *udpConn) Write(b []byte) (int, error) {
	if c.raddr == nil {
		return 0, c.opError("write", nil, errMissingAddress)
	}
	return c.pc.WriteTo(b, c.raddr)
}

// WriteTo implements net.PacketConn.
func (c *udpConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	if c.raddr != nil {
		if addr == nil {
			return c.Write(b)
		}
		return 0, c.opError("write", addr, net.ErrWriteToConnected)
	}
	if addr == nil {
		return 0, c.opError("write", nil, errMissingAddress)
	}
	ua, err := toUDPAddr(addr)
	if err != nil {
		return 0, c.opError("write", addr, err)
	}
	return c.pc.WriteTo(b, ua)
}

// WriteToUDP implements transport.UDPConn.
func (c *udpConn) WriteToUDP(b []byte, addr *net.UDPAddr) (int, error) {
	if addr == nil {
		return c.WriteTo(b, nil)
	}
	return c.WriteTo(b, addr)
}

// WriteMsgUDP sends b like WriteToUDP. Control messages cannot be passed
// through a net.PacketConn, so a non-empty oob fails rather than being
// silently dropped.
func (c *udpConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	if len(oob) > 0 {
		return 0, 0, c.opError("write", addr, fmt.Errorf("netx: udp control messages: %w", errors.ErrUnsupported))
	}
	n, err = c.WriteToUDP(b, addr)
	return n, 0, err
}

func (c *udpConn) opError(op string, addr net.Addr, err error) error {
	oe := &net.OpError{Op: op, Net: "udp", Source: c.LocalAddr(), Err: err}
	if addr != nil {
		oe.Addr = addr
	}
	return oe
}

// toUDPAddr returns a as a *net.UDPAddr whose IPv4 address is 4 bytes
// long (see ipOf), copying only when a needs changing.
func toUDPAddr(a net.Addr) (*net.UDPAddr, error) {
	if ua, ok := a.(*net.UDPAddr); ok && ua != nil {
		if len(ua.IP) != net.IPv6len || ua.IP.To4() == nil {
			return ua, nil
		}
		return &net.UDPAddr{IP: ua.IP.To4(), Port: ua.Port}, nil
	}
	if a == nil {
		return nil, transport.ErrNotUDPAddress
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %s %q", transport.ErrNotUDPAddress, a.Network(), a.String())
	}
	return &net.UDPAddr{IP: ipOf(ap.Addr()), Port: int(ap.Port()), Zone: ap.Addr().Zone()}, nil
}

// dialedPacketConn presents a connected socket from Network.Dial as a
// PacketConn whose only peer is its remote address.
type dialedPacketConn struct {
	net.Conn
}

func (d dialedPacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := d.Read(b)
	if err != nil {
		return n, nil, err
	}
	return n, d.RemoteAddr(), nil
}

func (d dialedPacketConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	return d.Write(b)
}

func (d dialedPacketConn) unwrap() any { return d.Conn }

// underlying returns the socket behind pc for optional-method checks.
func underlying(pc net.PacketConn) any {
	if u, ok := pc.(interface{ unwrap() any }); ok {
		return u.unwrap()
	}
	return pc
}
