package node

import "sync"

// mailboxMax bounds the events waiting for one peer's actor, as the
// channel it replaced did: a full mailbox means the actor is far behind,
// and post drops the event.
const mailboxMax = 64

// mailbox is a peer actor's event queue. Unlike a buffered channel, which
// keeps its whole buffer for the peer's life (64 events, 4.3 KB a peer:
// 4.3 GB for a thousand nodes of 999 peers each in one lab process), it
// holds memory only while events wait.
type mailbox struct {
	mu   sync.Mutex  // guards q
	q    []peerEvent // waiting, oldest first
	wake chan struct{}
}

func newMailbox() mailbox { return mailbox{wake: make(chan struct{}, 1)} }

// put queues ev and wakes the actor; false if the mailbox is full.
func (m *mailbox) put(ev peerEvent) bool {
	m.mu.Lock()
	if len(m.q) >= mailboxMax {
		m.mu.Unlock()
		return false
	}
	m.q = append(m.q, ev)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default: // a wake is pending already
	}
	return true
}

// take returns the waiting events, oldest first, and empties the mailbox;
// the slice is the caller's.
func (m *mailbox) take() []peerEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.q
	m.q = nil
	return q
}
