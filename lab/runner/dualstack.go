package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/latticelab/lattice/netx"
)

// A service on a dual-stack network listens on its IPv4 address and on
// that address's IPv6 twin, as one listener: the relay has to be one
// server on both families (it forwards between nodes of either), and
// control and relay take one listen address. twinNet gives them that
// without their knowing: Listen and ListenPacket on an address that has
// a twin open both and merge them.

// twinNet is a Network whose listens on the keys of twins also listen on
// their values.
type twinNet struct {
	netx.Network
	twins map[netip.AddrPort]netip.AddrPort
}

// withTwins wraps n so that listening on each service address in twins
// listens on its IPv6 twin too; with no twins it is n.
func withTwins(n netx.Network, twins map[netip.AddrPort]netip.AddrPort) netx.Network {
	for a, b := range twins {
		if !b.IsValid() {
			delete(twins, a)
		}
	}
	if len(twins) == 0 {
		return n
	}
	return &twinNet{Network: n, twins: twins}
}

func (t *twinNet) twin(address string) (netip.AddrPort, bool) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return netip.AddrPort{}, false
	}
	tw, ok := t.twins[ap]
	return tw, ok
}

// Listen implements netx.Network.
func (t *twinNet) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	return listenTwin(ctx, t, t.Network.Listen, network, "tcp6", address,
		func(a, b net.Listener) net.Listener { return newTwinListener(a, b) })
}

// ListenPacket implements netx.Network.
func (t *twinNet) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	return listenTwin(ctx, t, t.Network.ListenPacket, network, "udp6", address,
		func(a, b net.PacketConn) net.PacketConn { return newTwinPacketConn(a, b) })
}

// listenTwin listens on address with listen and, if it has a twin, on
// the twin as network6 too, and merges the two.
func listenTwin[L io.Closer](ctx context.Context, t *twinNet, listen func(context.Context, string, string) (L, error),
	network, network6, address string, merge func(first, second L) L) (L, error) {
	first, err := listen(ctx, network, address)
	tw, ok := t.twin(address)
	if err != nil || !ok {
		return first, err
	}
	second, err := listen(ctx, network6, tw.String())
	if err != nil {
		_ = first.Close()
		var zero L
		return zero, fmt.Errorf("listen on the IPv6 twin %v: %w", tw, err)
	}
	return merge(first, second), nil
}

// twinListener accepts from two listeners.
type twinListener struct {
	ls   [2]net.Listener
	in   chan acceptResult
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

type acceptResult struct {
	c   net.Conn
	err error
}

func newTwinListener(a, b net.Listener) *twinListener {
	l := &twinListener{ls: [2]net.Listener{a, b}, in: make(chan acceptResult), done: make(chan struct{})}
	for _, one := range l.ls {
		l.wg.Add(1)
		go l.accept(one)
	}
	return l
}

func (l *twinListener) accept(one net.Listener) {
	defer l.wg.Done()
	for {
		c, err := one.Accept()
		select {
		case l.in <- acceptResult{c, err}:
		case <-l.done:
			if c != nil {
				_ = c.Close()
			}
			return
		}
		if err != nil {
			return // the listener is closed or broken: its twin goes on
		}
	}
}

// Accept returns the next connection from either listener. The first
// error from either ends the listener, as a failed Accept ends a server's
// accept loop.
func (l *twinListener) Accept() (net.Conn, error) {
	select {
	case r := <-l.in:
		return r.c, r.err
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: net.ErrClosed}
	}
}

// Close closes both listeners and waits for their accept loops.
func (l *twinListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = errors.Join(l.ls[0].Close(), l.ls[1].Close())
		l.wg.Wait()
	})
	return err
}

// Addr is the IPv4 listener's address.
func (l *twinListener) Addr() net.Addr { return l.ls[0].Addr() }

// twinPacketConn reads from two sockets and writes through the one of the
// destination's family.
type twinPacketConn struct {
	pcs  [2]net.PacketConn // IPv4, IPv6
	in   chan datagram
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup

	mu       sync.Mutex // guards the following fields
	deadline time.Time
	wake     chan struct{} // closed when the deadline changes
}

type datagram struct {
	buf  *[]byte
	n    int
	from net.Addr
	err  error
}

// maxDatagram is the largest UDP payload.
const maxDatagram = 64 << 10

var datagramBufs = sync.Pool{New: func() any { b := make([]byte, maxDatagram); return &b }}

func newTwinPacketConn(v4, v6 net.PacketConn) *twinPacketConn {
	c := &twinPacketConn{pcs: [2]net.PacketConn{v4, v6}, in: make(chan datagram), done: make(chan struct{}), wake: make(chan struct{})}
	for _, pc := range c.pcs {
		c.wg.Add(1)
		go c.read(pc)
	}
	return c
}

func (c *twinPacketConn) read(pc net.PacketConn) {
	defer c.wg.Done()
	for {
		buf := datagramBufs.Get().(*[]byte)
		n, from, err := pc.ReadFrom(*buf)
		select {
		case c.in <- datagram{buf, n, from, err}:
		case <-c.done:
			datagramBufs.Put(buf)
			return
		}
		if err != nil && !isTemporary(err) {
			return
		}
	}
}

func isTemporary(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ReadFrom implements net.PacketConn.
func (c *twinPacketConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		c.mu.Lock()
		deadline, wake := c.deadline, c.wake
		c.mu.Unlock()
		if n, from, again, err := c.readUntil(p, deadline, wake); !again {
			return n, from, err
		}
	}
}

// readUntil waits for a datagram until deadline, or until wake says the
// deadline changed (again).
func (c *twinPacketConn) readUntil(p []byte, deadline time.Time, wake chan struct{}) (n int, from net.Addr, again bool, err error) {
	select {
	case <-c.done:
		return 0, nil, false, c.opError("read", net.ErrClosed)
	default:
	}
	var expired <-chan time.Time
	if !deadline.IsZero() {
		d := time.Until(deadline)
		if d <= 0 {
			return 0, nil, false, c.opError("read", os.ErrDeadlineExceeded)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		expired = t.C
	}
	select {
	case dg := <-c.in:
		n := copy(p, (*dg.buf)[:dg.n])
		datagramBufs.Put(dg.buf)
		return n, dg.from, false, dg.err
	case <-expired:
		return 0, nil, false, c.opError("read", os.ErrDeadlineExceeded)
	case <-wake:
		return 0, nil, true, nil
	case <-c.done:
		return 0, nil, false, c.opError("read", net.ErrClosed)
	}
}

// WriteTo sends from the socket of addr's family.
func (c *twinPacketConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	pc := c.pcs[0]
	if ua, ok := addr.(*net.UDPAddr); ok && ua.AddrPort().Addr().Unmap().Is6() {
		pc = c.pcs[1]
	}
	return pc.WriteTo(p, addr)
}

func (c *twinPacketConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "udp", Addr: c.LocalAddr(), Err: err}
}

// Close closes both sockets and waits for their readers.
func (c *twinPacketConn) Close() error {
	var err error
	c.once.Do(func() {
		close(c.done)
		err = errors.Join(c.pcs[0].Close(), c.pcs[1].Close())
		c.wg.Wait()
	})
	return err
}

// LocalAddr is the IPv4 socket's address.
func (c *twinPacketConn) LocalAddr() net.Addr { return c.pcs[0].LocalAddr() }

// SetDeadline implements net.PacketConn.
func (c *twinPacketConn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}

// SetReadDeadline bounds ReadFrom, now and later.
func (c *twinPacketConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
	return nil
}

// SetWriteDeadline implements net.PacketConn.
func (c *twinPacketConn) SetWriteDeadline(t time.Time) error {
	return errors.Join(c.pcs[0].SetWriteDeadline(t), c.pcs[1].SetWriteDeadline(t))
}

// SetReadBuffer sets both sockets' receive buffers where they have one
// (quic-go asks for a large one).
func (c *twinPacketConn) SetReadBuffer(n int) error {
	var errs []error
	for _, pc := range c.pcs {
		if b, ok := pc.(interface{ SetReadBuffer(int) error }); ok {
			errs = append(errs, b.SetReadBuffer(n))
		}
	}
	return errors.Join(errs...)
}

// SetWriteBuffer is SetReadBuffer for the send buffers.
func (c *twinPacketConn) SetWriteBuffer(n int) error {
	var errs []error
	for _, pc := range c.pcs {
		if b, ok := pc.(interface{ SetWriteBuffer(int) error }); ok {
			errs = append(errs, b.SetWriteBuffer(n))
		}
	}
	return errors.Join(errs...)
}
