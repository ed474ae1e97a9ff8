// Package splice joins two connections both ways, passing half-closes on.
package splice

import (
	"io"
	"net"
)

// closeWriter is a connection that can half-close: *net.TCPConn,
// *net.UnixConn, *tls.Conn, gVisor's gonet.TCPConn.
type closeWriter interface {
	CloseWrite() error
}

// Splice copies a to b and b to a until both directions are done, then
// closes both. When one side ends its stream cleanly, the end is passed on
// with CloseWrite and the other direction keeps going (a client may still
// be reading the answer to what it sent); an error in either direction, or
// a destination that cannot half-close, tears both down. The second
// goroutine is joined before Splice returns, so callers count only their
// own.
func Splice(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		oneWay(b, a)
	}()
	oneWay(a, b)
	<-done
	_ = a.Close()
	_ = b.Close()
}

// oneWay copies src to dst. io.Copy uses splice(2) between two TCP sockets.
func oneWay(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err == nil {
		if cw, ok := dst.(closeWriter); ok && cw.CloseWrite() == nil {
			return
		}
	}
	_ = dst.Close()
	_ = src.Close()
}
