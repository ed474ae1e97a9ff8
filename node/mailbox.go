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
//
// It also runs the actor. With a drain function (actorMailbox), put
// starts drain on a goroutine of its own when an event arrives and none
// is running, and that goroutine returns once the mailbox is empty: a
// peer with nothing to do has no goroutine, so no stack (a goroutine's
// stack is at least 8 KiB: 8 GB for the million peers of a 1000-node
// lab, and the GC scans every one of them each cycle). At most one drain
// runs at a time, so what the actor owns is still touched by one
// goroutine at a time, in event order. Without one (tests that drive a
// peer by hand), put signals wake instead.
type mailbox struct {
	mu      sync.Mutex  // guards q, running, closed
	q       []peerEvent // waiting, oldest first
	running bool        // a drain goroutine is at work
	closed  bool        // no more events (close was queued)
	drain   func()      // the actor, run by put; nil: hand-driven
	wake    chan struct{}
}

// putResult is what put did with an event.
type putResult int

const (
	queued putResult = iota
	full             // mailboxMax events wait: dropped
	closed           // the actor is closing: dropped
)

// put queues ev and wakes or starts the actor.
func (m *mailbox) put(ev peerEvent) putResult {
	m.mu.Lock()
	switch {
	case m.closed:
		m.mu.Unlock()
		return closed
	case len(m.q) >= mailboxMax:
		m.mu.Unlock()
		return full
	}
	m.q = append(m.q, ev)
	m.startLocked()
	return queued
}

// closeWith queues ev, the actor's last event, even into a full mailbox,
// and refuses every event after it.
func (m *mailbox) closeWith(ev peerEvent) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	m.q = append(m.q, ev)
	m.startLocked()
}

// startLocked starts the drain if none runs (or wakes a hand-driven
// actor) and unlocks m.
func (m *mailbox) startLocked() {
	start := m.drain != nil && !m.running
	if start {
		m.running = true
	}
	m.mu.Unlock()
	switch {
	case start:
		go m.drain()
	case m.wake != nil:
		select {
		case m.wake <- struct{}{}:
		default: // a wake is pending already
		}
	}
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

// next is take for the drain goroutine: when no event waits it marks the
// drain stopped and returns nil, and the goroutine must return; the next
// put starts another.
func (m *mailbox) next() []peerEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.q
	m.q = nil
	if len(q) == 0 {
		m.running = false
	}
	return q
}
