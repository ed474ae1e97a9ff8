//go:build !linux && !darwin && !freebsd

package runner

import "net"

// checkPeer admits every peer: this system has no peer credentials on
// unix sockets, so the socket's directory (0700, the state directory)
// is the only bound on who connects.
func checkPeer(*net.UnixConn) error { return nil }
