package runner

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// checkPeer admits only this process's user and root (SO_PEERCRED), on
// top of the socket's mode.
func checkPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
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
