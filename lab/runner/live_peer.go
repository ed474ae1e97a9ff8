package runner

import (
	"fmt"
	"net"
	"os"
)

// checkPeer admits only this process's user and root, on top of the
// socket's mode: the peer's uid as the kernel reports it (peerUID).
func checkPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var uid uint32
	var uerr error
	if err := raw.Control(func(fd uintptr) { uid, uerr = peerUID(int(fd)) }); err != nil {
		return err
	}
	if uerr != nil {
		return fmt.Errorf("peer credentials: %w", uerr)
	}
	if self := uint32(os.Getuid()); uid != self && uid != 0 {
		return fmt.Errorf("peer uid %d is not %d", uid, self)
	}
	return nil
}
