package netx_test

import (
	"net"
	"net/netip"
	"syscall"
	"testing"
)

// blackhole returns a loopback TCP address that never answers a SYN. It
// is a listener with a backlog of 0 whose single accept-queue slot is
// taken by a connection nobody accepts; Linux then drops further SYNs
// (the client retransmits) instead of refusing them. Nothing leaves the
// loopback interface and no privileges are needed.
func blackhole(t *testing.T, addr netip.Addr) netip.AddrPort {
	t.Helper()
	var (
		domain = syscall.AF_INET6
		sa     syscall.Sockaddr
	)
	if addr.Is4() {
		domain = syscall.AF_INET
		sa = &syscall.SockaddrInet4{Addr: addr.As4()}
	} else {
		sa = &syscall.SockaddrInet6{Addr: addr.As16()}
	}
	fd, err := syscall.Socket(domain, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("blackhole socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, sa); err != nil {
		t.Fatalf("blackhole bind: %v", err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatalf("blackhole listen: %v", err)
	}
	bound, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("blackhole getsockname: %v", err)
	}
	var port int
	switch b := bound.(type) {
	case *syscall.SockaddrInet4:
		port = b.Port
	case *syscall.SockaddrInet6:
		port = b.Port
	}
	ap := netip.AddrPortFrom(addr, uint16(port)) //nolint:gosec // a port from the kernel
	filler, err := net.Dial("tcp", ap.String())
	if err != nil {
		t.Fatalf("blackhole fill: %v", err)
	}
	t.Cleanup(func() { _ = filler.Close() })
	return ap
}
