package node

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMailbox: events come out oldest first, one wake stands for any
// number of puts, a full mailbox refuses (and says so), and an emptied
// one holds no buffer: an idle peer costs its mailbox's header only.
func TestMailbox(t *testing.T) {
	m := newMailbox()
	for i := range mailboxMax {
		require.True(t, m.put(peerEvent{session: uint64(i)}), "event %d", i)
	}
	assert.False(t, m.put(peerEvent{session: 999}), "the 65th event is dropped")
	assert.Len(t, m.wake, 1, "one wake for all the puts")
	<-m.wake
	got := m.take()
	require.Len(t, got, mailboxMax)
	for i, ev := range got {
		assert.Equal(t, uint64(i), ev.session, "oldest first")
	}
	assert.Nil(t, m.q, "an emptied mailbox keeps no buffer")
	assert.Empty(t, m.take())
	assert.True(t, m.put(peerEvent{retry: true}), "room again")
	assert.Len(t, m.wake, 1)

	// What the channel it replaced kept for the peer's life.
	channelBuffer := mailboxMax * unsafe.Sizeof(peerEvent{})
	t.Logf("per idle peer: mailbox %d bytes (+ a 1-slot channel) against a %d-byte channel buffer", unsafe.Sizeof(mailbox{}), channelBuffer)
}
