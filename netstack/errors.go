package netstack

import (
	"errors"
	"syscall"

	"gvisor.dev/gvisor/pkg/tcpip"
)

var (
	// ErrClosed reports an operation on a Stack after Close.
	ErrClosed = errors.New("netstack: stack closed")

	// ErrNoAddress reports a Config without an overlay Address.
	ErrNoAddress = errors.New("netstack: Config.Address is required")
)

// errnoOf converts a gVisor error into the syscall.Errno package net would
// report for it, so callers test errors.Is(err, syscall.ECONNREFUSED) on
// either network; others keep gVisor's text.
func errnoOf(err tcpip.Error) error {
	switch err.(type) {
	case *tcpip.ErrConnectionRefused:
		return syscall.ECONNREFUSED
	case *tcpip.ErrHostUnreachable:
		return syscall.EHOSTUNREACH
	case *tcpip.ErrHostDown:
		return syscall.EHOSTDOWN
	case *tcpip.ErrNetworkUnreachable:
		return syscall.ENETUNREACH
	case *tcpip.ErrTimeout:
		return syscall.ETIMEDOUT
	case *tcpip.ErrConnectionReset:
		return syscall.ECONNRESET
	case *tcpip.ErrConnectionAborted:
		return syscall.ECONNABORTED
	case *tcpip.ErrPortInUse:
		return syscall.EADDRINUSE
	default:
		return errors.New(err.String())
	}
}
