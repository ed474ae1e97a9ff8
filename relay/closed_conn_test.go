package relay

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClosedConnectionForwardsNothing: once the relay has closed a
// connection (replaced, idle, shutting down, its writer failed), the
// frames still buffered from it are not forwarded. The read loop meets
// the close only when its buffer runs dry, and a buffer holds up to 16 KiB
// of SEND frames; here they are all in it when the connection fails.
func TestClosedConnectionForwardsNothing(t *testing.T) {
	s := startServer(t, ServerConfig{})
	kb := newKey(t)
	b, err := dialRaw(t, s, transportTCP, kb, IssueToken(testSecret, kb, time.Now().Add(time.Hour)))
	require.NoError(t, err)
	marker := []byte("sent to a closed connection")
	var buffered []byte
	for range 3 {
		buffered = append(buffered, mustFrame(t, frame{typ: frameSend, key: kb, data: marker})...)
	}

	nc, peer := net.Pipe()
	t.Cleanup(func() {
		_ = nc.Close()
		_ = peer.Close()
	})
	w := newTCPWire(nc, frameRecv)
	w.br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(buffered), nc), bufSize)
	c := &sconn{srv: s, key: newKey(t), w: w, sendq: newPktQueue(16), lim: newLimiter(-1, 16)}
	w.fail(CloseReplaced, "another connection registered this key", nil, false)
	c.readLoop()

	assert.Zero(t, s.Stats().PacketsIn, "packets read from a closed connection were counted")
	assert.False(t, b.recvMarker(marker, 300*time.Millisecond), "a packet read from a closed connection was forwarded")
}
