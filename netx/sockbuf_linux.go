package netx

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

func setSocketBuffers(pc net.PacketConn, bytes int) error {
	sc, ok := pc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("netx: socket buffers: %w", err)
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		for _, o := range []struct {
			force, plain int
			name         string
		}{
			{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, "receive"},
			{unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, "send"},
		} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o.force, bytes) == nil {
				continue
			}
			if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o.plain, bytes); e != nil && serr == nil {
				serr = fmt.Errorf("netx: %s buffer of %d bytes: %w", o.name, bytes, e)
			}
		}
	})
	if err != nil {
		return fmt.Errorf("netx: socket buffers: %w", err)
	}
	return serr
}
