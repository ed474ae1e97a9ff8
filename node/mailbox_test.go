package node

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newMailbox returns a hand-driven mailbox, for tests that drive a peer
// themselves: put signals wake.
func newMailbox() mailbox { return mailbox{wake: make(chan struct{}, 1)} }

// TestMailbox: events come out oldest first, one wake stands for any
// number of puts, a full mailbox refuses (and says so), and an emptied
// one holds no buffer: an idle peer costs its mailbox's header only.
func TestMailbox(t *testing.T) {
	m := newMailbox()
	for i := range mailboxMax {
		require.Equal(t, queued, m.put(peerEvent{session: uint64(i)}), "event %d", i)
	}
	assert.Equal(t, full, m.put(peerEvent{session: 999}), "the 65th event is dropped")
	assert.Len(t, m.wake, 1, "one wake for all the puts")
	<-m.wake
	got := m.take()
	require.Len(t, got, mailboxMax)
	for i, ev := range got {
		assert.Equal(t, uint64(i), ev.session, "oldest first")
	}
	assert.Nil(t, m.q, "an emptied mailbox keeps no buffer")
	assert.Empty(t, m.take())
	assert.Equal(t, queued, m.put(peerEvent{retry: true}), "room again")
	assert.Len(t, m.wake, 1)

	// What the channel it replaced kept for the peer's life.
	channelBuffer := mailboxMax * unsafe.Sizeof(peerEvent{})
	t.Logf("per idle peer: mailbox %d bytes (+ a 1-slot channel) against a %d-byte channel buffer", unsafe.Sizeof(mailbox{}), channelBuffer)
}

// TestMailboxRunsActor: with a drain, the actor runs only while events
// wait: one goroutine at a time, every event once and in order, none left
// running when the mailbox is empty, and nothing after closeWith but its
// own event, which a full mailbox still takes.
func TestMailboxRunsActor(t *testing.T) {
	var (
		m       mailbox
		mu      sync.Mutex
		got     []uint64
		running atomic.Int32
		most    atomic.Int32
		ended   = make(chan struct{})
	)
	m.drain = func() {
		n := running.Add(1)
		if n > most.Load() {
			most.Store(n)
		}
		defer running.Add(-1)
		for evs := m.next(); evs != nil; evs = m.next() {
			for _, ev := range evs {
				if ev.end {
					close(ended)
					return
				}
				mu.Lock()
				got = append(got, ev.session)
				mu.Unlock()
				runtime.Gosched()
			}
		}
	}
	const events = 2000
	for i := range events {
		for m.put(peerEvent{session: uint64(i)}) == full {
			runtime.Gosched()
		}
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == events
	}, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return running.Load() == 0 }, 10*time.Second, time.Millisecond,
		"the drain returns once the mailbox is empty")
	assert.Equal(t, int32(1), most.Load(), "one drain at a time")
	for i, s := range got {
		require.Equal(t, uint64(i), s, "in order")
	}

	// Full, then closed: the end event still gets in, nothing after it.
	m.mu.Lock()
	m.running = true // hold the drain off while the mailbox fills
	m.mu.Unlock()
	for m.put(peerEvent{session: 1}) == queued {
	}
	m.closeWith(peerEvent{end: true})
	assert.Equal(t, closed, m.put(peerEvent{session: 2}))
	m.mu.Lock()
	assert.Len(t, m.q, mailboxMax+1)
	assert.True(t, m.q[mailboxMax].end)
	m.running = false
	m.mu.Unlock()
	go m.drain()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the end event was not handled")
	}
}
