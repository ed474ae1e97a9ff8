//go:build !linux

package netstack

import (
	"net"
	"testing"
)

// requireKernelNet skips tb: the kernel comparison needs Linux network
// namespaces.
func requireKernelNet(tb testing.TB) {
	tb.Helper()
	tb.Skip("kernel: needs Linux network namespaces")
}

// kernelPair skips tb; see kernel_linux_test.go.
func kernelPair(tb testing.TB) (send, recv net.Conn) {
	tb.Helper()
	requireKernelNet(tb)
	return nil, nil
}

// gvisorSend skips tb; see gvisor_linux_test.go.
func gvisorSend(b *testing.B) { requireKernelNet(b) }
