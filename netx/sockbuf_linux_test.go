package netx_test

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/latticelab/lattice/netx"
)

// TestSetSocketBuffers: a kernel UDP socket gets the buffers asked for
// (as root, past net.core.rmem_max), or at least no error without root.
func TestSetSocketBuffers(t *testing.T) {
	pc, err := netx.OS.ListenPacket(t.Context(), "udp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer pc.Close()
	get := func(opt int) int {
		rc, err := pc.(syscall.Conn).SyscallConn()
		require.NoError(t, err)
		var v int
		var gerr error
		require.NoError(t, rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, opt) }))
		require.NoError(t, gerr)
		return v
	}
	before := get(unix.SO_RCVBUF)
	require.NoError(t, netx.SetSocketBuffers(pc, netx.SocketBufferSize))
	if os.Geteuid() != 0 {
		assert.GreaterOrEqual(t, get(unix.SO_RCVBUF), before, "without root the kernel grants up to rmem_max")
		return
	}
	// Linux doubles what it is asked for, for its bookkeeping.
	assert.GreaterOrEqual(t, get(unix.SO_RCVBUF), netx.SocketBufferSize, "receive buffer (was %d)", before)
	assert.GreaterOrEqual(t, get(unix.SO_SNDBUF), netx.SocketBufferSize, "send buffer")
}
