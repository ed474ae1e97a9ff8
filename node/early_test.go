package node

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestEarlySignals: signals from an unknown node wait, in order and
// copied, until it is a peer; each sender keeps at most earlyPerSender,
// all together at most earlyMaxBytes, and none outlives signalMaxAge.
func TestEarlySignals(t *testing.T) {
	var e earlySignals
	now := time.Unix(1000, 0)
	buf := []byte("one")
	e.keep("a", buf, now)
	buf[0] = 'X' // the caller's buffer is reused
	e.keep("a", []byte("two"), now)
	assert.Equal(t, [][]byte{[]byte("one"), []byte("two")}, e.take("a", now))
	assert.Empty(t, e.take("a", now), "taken once")
	assert.Zero(t, e.bytes)

	for range earlyPerSender + 3 {
		e.keep("b", []byte("x"), now)
	}
	assert.Len(t, e.take("b", now), earlyPerSender)

	big := bytes.Repeat([]byte{1}, earlyMaxBytes/2+1)
	e.keep("c", big, now)
	e.keep("d", big, now)
	assert.Len(t, e.take("d", now), 0, "over earlyMaxBytes")
	assert.Len(t, e.take("c", now), 1)

	e.keep("old", []byte("x"), now)
	e.keep("old", []byte("y"), now.Add(time.Minute))
	assert.Equal(t, [][]byte{[]byte("y")}, e.take("old", now.Add(signalMaxAge+time.Second)), "aged out")
	assert.Zero(t, e.bytes)
	assert.Empty(t, e.m)
}
