package fabric

import (
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/latticelab/lattice/internal/deadline"
)

// dgram is a queued datagram: its payload is f[off:off+n].
type dgram struct {
	f      []byte
	off, n int
	from   netip.AddrPort
}

// udpConn is a UDP socket on a lab host. It implements net.PacketConn and,
// when connected (Dial), net.Conn.
type udpConn struct {
	u      *udpStack
	local  netip.AddrPort
	remote netip.AddrPort // valid when connected

	mu     sync.Mutex
	queue  []dgram
	head   int
	bytes  int
	limit  int
	closed bool
	soErr  error // a pending ICMP error (connected sockets), returned once by the next read or write

	notify chan struct{} // signalled when a datagram is queued
	done   chan struct{} // closed by Close
	once   sync.Once
	rd, wd deadline.Deadline
}

var (
	_ net.PacketConn = (*udpConn)(nil)
	_ net.Conn       = (*udpConn)(nil)
)

func (c *udpConn) push(f []byte, off, n int, from netip.AddrPort) bool {
	c.mu.Lock()
	if c.closed || (c.bytes > 0 && c.bytes+n > c.limit) {
		c.mu.Unlock()
		return false
	}
	c.queue = append(c.queue, dgram{f: f, off: off, n: n, from: from})
	c.bytes += n
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
	return true
}

// pop returns the oldest datagram, if any. c.mu must be held.
func (c *udpConn) popLocked() (dgram, bool) {
	if c.head == len(c.queue) {
		return dgram{}, false
	}
	d := c.queue[c.head]
	c.queue[c.head] = dgram{}
	c.head++
	c.bytes -= d.n
	if c.head == len(c.queue) {
		c.queue, c.head = c.queue[:0], 0
	}
	return d, true
}

func (c *udpConn) opError(op string, addr net.Addr, err error) error {
	return &net.OpError{Op: op, Net: "udp", Source: net.UDPAddrFromAddrPort(c.local), Addr: addr, Err: err}
}

// setError records an ICMP error for the next read or write and wakes a
// reader.
func (c *udpConn) setError(err error) {
	c.mu.Lock()
	c.soErr = err
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// takeError returns and clears the pending ICMP error.
func (c *udpConn) takeError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.soErr
	c.soErr = nil
	return err
}

func (c *udpConn) read(b []byte) (int, netip.AddrPort, error) {
	var (
		sizes [1]int
		from  [1]netip.AddrPort
	)
	_, err := c.readBatch([][]byte{b}, sizes[:], from[:])
	return sizes[0], from[0], err
}

// readBatch waits for a datagram, then fills bufs with it and whatever
// else is queued, up to len(bufs), under one lock: sizes and from get each
// one's length (truncated to its buffer, the rest discarded, as recvfrom(2)
// does) and source. It returns how many it filled.
func (c *udpConn) readBatch(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	want := min(len(bufs), len(sizes), len(from))
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return 0, net.ErrClosed
		}
		if err := c.soErr; err != nil {
			c.soErr = nil
			c.mu.Unlock()
			return 0, err
		}
		n := 0
		for n < want {
			d, ok := c.popLocked()
			if !ok {
				break
			}
			sizes[n] = copy(bufs[n], d.f[d.off:d.off+d.n])
			from[n] = d.from
			putFrame(d.f)
			n++
		}
		c.mu.Unlock()
		if n > 0 || want == 0 {
			return n, nil
		}
		select {
		case <-c.notify:
		case <-c.rd.Expired():
			return 0, os.ErrDeadlineExceeded
		case <-c.done:
		}
	}
}

// ReadFrom implements net.PacketConn.
func (c *udpConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, from, err := c.read(b)
	if err != nil {
		return 0, nil, c.opError("read", nil, err)
	}
	return n, net.UDPAddrFromAddrPort(from), nil
}

// Read implements net.Conn.
func (c *udpConn) Read(b []byte) (int, error) {
	n, _, err := c.read(b)
	if err != nil {
		return 0, c.opError("read", c.RemoteAddr(), err)
	}
	return n, nil
}

func (c *udpConn) write(b []byte, to netip.AddrPort) error {
	return c.writeBatch([][]byte{b}, to)
}

func (c *udpConn) writeBatch(bufs [][]byte, to netip.AddrPort) error {
	select {
	case <-c.done:
		return net.ErrClosed
	case <-c.wd.Expired():
		return os.ErrDeadlineExceeded
	default:
	}
	if err := c.takeError(); err != nil {
		return err
	}
	return c.u.sendBatch(c.local, to, bufs)
}

// WriteBatchTo sends each of bufs to addr, in order, as that many WriteTo
// calls would, but routes once and hands the fabric the frames as one run.
// On an error, the datagrams before the failing one have been sent.
func (c *udpConn) WriteBatchTo(bufs [][]byte, addr netip.AddrPort) error {
	if c.remote.IsValid() {
		return c.opError("write", udpAddrOrNil(addr), net.ErrWriteToConnected)
	}
	if err := c.writeBatch(bufs, netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())); err != nil {
		return c.opError("write", udpAddrOrNil(addr), err)
	}
	return nil
}

// ReadBatchFrom waits for a datagram as ReadFrom does, then fills bufs
// with it and whatever else is queued, up to len(bufs), in one go: sizes
// and from get each one's length and source. It returns how many it
// filled. A datagram longer than its buffer is truncated.
func (c *udpConn) ReadBatchFrom(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	n, err := c.readBatch(bufs, sizes, from)
	if err != nil {
		return 0, c.opError("read", nil, err)
	}
	return n, nil
}

// WriteTo implements net.PacketConn.
func (c *udpConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	if c.remote.IsValid() {
		return 0, c.opError("write", addr, net.ErrWriteToConnected)
	}
	to, err := toAddrPort(addr)
	if err != nil {
		return 0, c.opError("write", addr, err)
	}
	if err := c.write(b, to); err != nil {
		return 0, c.opError("write", addr, err)
	}
	return len(b), nil
}

// Write implements net.Conn.
func (c *udpConn) Write(b []byte) (int, error) {
	if !c.remote.IsValid() {
		return 0, c.opError("write", nil, syscall.EDESTADDRREQ)
	}
	if err := c.write(b, c.remote); err != nil {
		return 0, c.opError("write", c.RemoteAddr(), err)
	}
	return len(b), nil
}

// Close implements net.PacketConn. Queued datagrams are discarded.
func (c *udpConn) Close() error {
	first := false
	c.once.Do(func() {
		first = true
		c.u.unbind(c)
		c.mu.Lock()
		c.closed = true
		for {
			d, ok := c.popLocked()
			if !ok {
				break
			}
			putFrame(d.f)
		}
		c.mu.Unlock()
		close(c.done)
		c.rd.Stop()
		c.wd.Stop()
	})
	if !first {
		return c.opError("close", nil, net.ErrClosed)
	}
	return nil
}

// LocalAddr implements net.PacketConn.
func (c *udpConn) LocalAddr() net.Addr { return net.UDPAddrFromAddrPort(c.local) }

// RemoteAddr implements net.Conn; nil for an unconnected socket.
func (c *udpConn) RemoteAddr() net.Addr {
	if !c.remote.IsValid() {
		return nil
	}
	return net.UDPAddrFromAddrPort(c.remote)
}

func (c *udpConn) SetDeadline(t time.Time) error {
	c.rd.Set(t)
	c.wd.Set(t)
	return nil
}
func (c *udpConn) SetReadDeadline(t time.Time) error  { c.rd.Set(t); return nil }
func (c *udpConn) SetWriteDeadline(t time.Time) error { c.wd.Set(t); return nil }

// SetReadBuffer bounds the bytes queued for reading, as SO_RCVBUF does.
func (c *udpConn) SetReadBuffer(n int) error {
	if n <= 0 {
		return c.opError("set", nil, syscall.EINVAL)
	}
	c.mu.Lock()
	c.limit = n
	c.mu.Unlock()
	return nil
}

// SetWriteBuffer is accepted for compatibility: sends never queue.
func (c *udpConn) SetWriteBuffer(n int) error {
	if n <= 0 {
		return c.opError("set", nil, syscall.EINVAL)
	}
	return nil
}

func toAddrPort(a net.Addr) (netip.AddrPort, error) {
	switch a := a.(type) {
	case *net.UDPAddr:
		if a == nil {
			return netip.AddrPort{}, syscall.EINVAL
		}
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	case nil:
		return netip.AddrPort{}, syscall.EDESTADDRREQ
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.AddrPort{}, &net.AddrError{Err: "not a UDP address", Addr: a.String()}
		}
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
}

func udpAddrOrNil(ap netip.AddrPort) net.Addr {
	if !ap.IsValid() {
		return nil
	}
	return net.UDPAddrFromAddrPort(ap)
}
