package relay

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
)

func queued(i int) outPacket {
	return outPacket{key: key.Public{byte(i)}, pkt: []byte{byte(i), byte(i >> 8)}}
}

// TestPktQueueOrderAcrossGrowth: packets leave in the order they came,
// across the ring's wrap-around and its growth, and the ring holds room
// for the backlog, not for the limit.
func TestPktQueueOrderAcrossGrowth(t *testing.T) {
	q := newPktQueue(1000)
	assert.Empty(t, q.ring, "an unused queue holds no slots")
	next, want := 0, 0
	var got []outPacket
	for round := range 20 {
		for range round * 7 % 50 {
			require.True(t, q.push(queued(next)))
			next++
		}
		got = q.pop(got[:0], round%9+1)
		for _, p := range got {
			require.Equal(t, queued(want), p, "packet %d out of order", want)
			want++
		}
	}
	for got = q.pop(got[:0], 1000); len(got) > 0; got = q.pop(got[:0], 1000) {
		for _, p := range got {
			require.Equal(t, queued(want), p)
			want++
		}
	}
	assert.Equal(t, next, want, "every packet came out")
	assert.LessOrEqual(t, len(q.ring), 512, "the ring grew to the backlog (at most a few hundred), not to the limit")
}

// TestPktQueueFull: a full queue refuses packets; a sender waiting for
// room is woken by the writer's next pop.
func TestPktQueueFull(t *testing.T) {
	q := newPktQueue(20)
	for i := range 20 {
		require.True(t, q.push(queued(i)))
	}
	assert.False(t, q.push(queued(20)), "the 21st packet of a 20-packet queue")
	assert.Equal(t, 20, len(q.ring), "the ring stops at the limit")
	space := q.waitSpace()
	require.NotNil(t, space)
	assert.Equal(t, space, q.waitSpace(), "waiting senders share one channel")
	select {
	case <-space:
		t.Fatal("room signalled while full")
	default:
	}
	assert.Len(t, q.pop(nil, 1), 1)
	select {
	case <-space:
	default:
		t.Fatal("no room signalled after a pop from a full queue")
	}
	assert.Nil(t, q.waitSpace(), "room now")
	assert.True(t, q.push(queued(21)))
	assert.False(t, q.push(queued(22)))
}

// TestPktQueueDiscard empties the queue (a closed connection's backlog).
func TestPktQueueDiscard(t *testing.T) {
	q := newPktQueue(100)
	ps := make([]outPacket, 40)
	for i := range ps {
		ps[i] = copyPacket(key.Public{1}, []byte{byte(i)})
		require.True(t, q.push(ps[i]))
	}
	q.discard()
	assert.Empty(t, q.pop(nil, 100))
	assert.Zero(t, q.n)
}
