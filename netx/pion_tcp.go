package netx

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/pion/transport/v5"
)

// tcpConn gives any stream net.Conn the TCP-specific methods of
// transport.TCPConn. Each delegates when the connection has the method (a
// *net.TCPConn has all of them); otherwise a tuning knob (keep-alive,
// Nagle, linger, buffer sizes) is a no-op, since a user-space stack tunes
// itself, while a half-close, which changes what the peer sees, fails.
type tcpConn struct {
	net.Conn
}

var _ transport.TCPConn = (*tcpConn)(nil)

func newTCPConn(c net.Conn) *tcpConn { return &tcpConn{Conn: c} }

// CloseRead shuts down the reading side.
func (c *tcpConn) CloseRead() error {
	if h, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return h.CloseRead()
	}
	return fmt.Errorf("netx: tcp close read: %w", errors.ErrUnsupported)
}

// CloseWrite shuts down the writing side, sending FIN.
func (c *tcpConn) CloseWrite() error {
	if h, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return h.CloseWrite()
	}
	return fmt.Errorf("netx: tcp close write: %w", errors.ErrUnsupported)
}

// ReadFrom copies r to the connection, using the connection's own
// io.ReaderFrom (splice on Linux) when it has one.
func (c *tcpConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	// writerOnly hides this method from io.Copy, which would otherwise
	// call straight back into it.
	return io.Copy(writerOnly{c.Conn}, r)
}

type writerOnly struct{ io.Writer }

// SetLinger implements transport.TCPConn.
func (c *tcpConn) SetLinger(sec int) error {
	if s, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
		return s.SetLinger(sec)
	}
	return nil
}

// SetKeepAlive implements transport.TCPConn.
func (c *tcpConn) SetKeepAlive(keepalive bool) error {
	if s, ok := c.Conn.(interface{ SetKeepAlive(bool) error }); ok {
		return s.SetKeepAlive(keepalive)
	}
	return nil
}

// SetKeepAlivePeriod implements transport.TCPConn.
func (c *tcpConn) SetKeepAlivePeriod(d time.Duration) error {
	if s, ok := c.Conn.(interface{ SetKeepAlivePeriod(time.Duration) error }); ok {
		return s.SetKeepAlivePeriod(d)
	}
	return nil
}

// SetNoDelay implements transport.TCPConn.
func (c *tcpConn) SetNoDelay(noDelay bool) error {
	if s, ok := c.Conn.(interface{ SetNoDelay(bool) error }); ok {
		return s.SetNoDelay(noDelay)
	}
	return nil
}

// SetWriteBuffer implements transport.TCPConn.
func (c *tcpConn) SetWriteBuffer(bytes int) error {
	if s, ok := c.Conn.(interface{ SetWriteBuffer(int) error }); ok {
		return s.SetWriteBuffer(bytes)
	}
	return nil
}

// SetReadBuffer implements transport.TCPConn.
func (c *tcpConn) SetReadBuffer(bytes int) error {
	if s, ok := c.Conn.(interface{ SetReadBuffer(int) error }); ok {
		return s.SetReadBuffer(bytes)
	}
	return nil
}

// tcpListener gives any net.Listener AcceptTCP and SetDeadline.
type tcpListener struct {
	net.Listener
}

var _ transport.TCPListener = (*tcpListener)(nil)

// AcceptTCP accepts the next connection.
func (l *tcpListener) AcceptTCP() (transport.TCPConn, error) {
	c, err := l.Accept()
	if err != nil {
		return nil, err
	}
	return newTCPConn(c), nil
}

// SetDeadline delegates when the listener supports deadlines and fails
// otherwise: pretending to set one would leave Accept blocked forever.
func (l *tcpListener) SetDeadline(t time.Time) error {
	if s, ok := l.Listener.(interface{ SetDeadline(time.Time) error }); ok {
		return s.SetDeadline(t)
	}
	return fmt.Errorf("netx: tcp listener deadline: %w", errors.ErrUnsupported)
}
