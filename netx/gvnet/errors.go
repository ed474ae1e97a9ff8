package gvnet

import (
	"errors"
	"net"
	"syscall"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// opError converts a gVisor error, once, into the *net.OpError every
// netx.Network returns, its cause the errno package net would report.
func opError(op, network string, addr endpointAddr, err tcpip.Error) error {
	oe := &net.OpError{Op: op, Net: network, Err: Errno(err)}
	if addr.full.Addr.BitLen() != 0 || addr.full.Port != 0 {
		oe.Addr = netAddr(network, addr.addrPort())
	}
	return oe
}

// Errno converts a gVisor error into the syscall.Errno package net would
// report for it, so callers test errors.Is(err, syscall.ECONNREFUSED) on
// any Network; others keep gVisor's text.
func Errno(err tcpip.Error) error {
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
