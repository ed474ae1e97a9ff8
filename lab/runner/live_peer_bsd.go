//go:build darwin || freebsd

package runner

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// checkPeer admits only this process's user and root (LOCAL_PEERCRED),
// on top of the socket's mode.
func checkPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Xucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	if self := uint32(os.Getuid()); cred.Uid != self && cred.Uid != 0 {
		return fmt.Errorf("peer uid %d is not %d", cred.Uid, self)
	}
	return nil
}
