package netx_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
)

// bufferedConn is a user-space socket (like a lab host's) that records
// the buffer sizes asked of it.
type bufferedConn struct {
	net.PacketConn
	read, write int
}

func (c *bufferedConn) SetReadBuffer(n int) error  { c.read = n; return nil }
func (c *bufferedConn) SetWriteBuffer(n int) error { c.write = n; return nil }

// TestSetSocketBuffersUserSpace: a socket that is not the kernel's is
// asked for the same buffers through its own setters, so a node on a lab
// host queues what it would queue on a real one.
func TestSetSocketBuffersUserSpace(t *testing.T) {
	c := &bufferedConn{}
	require.NoError(t, netx.SetSocketBuffers(c, netx.SocketBufferSize))
	assert.Equal(t, netx.SocketBufferSize, c.read, "receive buffer")
	assert.Equal(t, netx.SocketBufferSize, c.write, "send buffer")

	// A socket without setters is left as it is.
	require.NoError(t, netx.SetSocketBuffers(struct{ net.PacketConn }{}, netx.SocketBufferSize))
}
