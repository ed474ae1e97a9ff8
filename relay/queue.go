package relay

import "sync"

// minQueueSlots is how many packets a queue holds room for before its
// first growth.
const minQueueSlots = 16

// pktQueue is a bounded FIFO of packets waiting for one writer (a
// wire's writeLoop), fed by any number of goroutines. Its ring grows by
// doubling as packets back up, up to limit, so a connection that keeps
// up holds a few slots while one whose TCP falls behind a fast sender
// may queue a bandwidth-delay product's worth. A channel of the same
// bound would hold all of it from the start, for every client.
type pktQueue struct {
	mu    sync.Mutex
	ring  []outPacket
	head  int // index of the oldest packet
	n     int // packets queued
	limit int
	// ready holds a token while packets may be waiting: push leaves one
	// whenever it queues, the writer takes it before draining.
	ready chan struct{}
	// space, if not nil, is closed (and cleared) when the queue stops
	// being full; waitSpace hands it out to senders that found it full.
	space chan struct{}
}

func newPktQueue(limit int) *pktQueue {
	return &pktQueue{limit: max(limit, 1), ready: make(chan struct{}, 1)}
}

// push queues p unless the queue holds limit packets already.
func (q *pktQueue) push(p outPacket) bool {
	q.mu.Lock()
	if q.n >= q.limit {
		q.mu.Unlock()
		return false
	}
	if q.n == len(q.ring) {
		q.grow()
	}
	q.ring[(q.head+q.n)%len(q.ring)] = p
	q.n++
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// grow doubles the ring (at least minQueueSlots, at most limit), the
// oldest packet first.
func (q *pktQueue) grow() {
	ring := make([]outPacket, min(max(2*len(q.ring), minQueueSlots), q.limit))
	for i := range q.n {
		ring[i] = q.ring[(q.head+i)%len(q.ring)]
	}
	q.ring, q.head = ring, 0
}

// waitSpace returns a channel closed once the queue has room, or nil if
// it has room now.
func (q *pktQueue) waitSpace() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n < q.limit {
		return nil
	}
	if q.space == nil {
		q.space = make(chan struct{})
	}
	return q.space
}

// pop appends up to n of the oldest packets to dst, and returns it.
func (q *pktQueue) pop(dst []outPacket, n int) []outPacket {
	q.mu.Lock()
	defer q.mu.Unlock()
	full := q.n >= q.limit
	for ; n > 0 && q.n > 0; n-- {
		dst = append(dst, q.ring[q.head])
		q.ring[q.head] = outPacket{}
		q.head = (q.head + 1) % len(q.ring)
		q.n--
	}
	if q.n == 0 {
		q.head = 0
	}
	if full && q.n < q.limit && q.space != nil {
		close(q.space)
		q.space = nil
	}
	return dst
}

// peekLen returns the length of the oldest packet, 0 if none is queued.
func (q *pktQueue) peekLen() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return 0
	}
	return len(q.ring[q.head].pkt)
}

// discard releases every queued packet (the connection is gone).
func (q *pktQueue) discard() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for ; q.n > 0; q.n-- {
		q.ring[q.head].release()
		q.ring[q.head] = outPacket{}
		q.head = (q.head + 1) % len(q.ring)
	}
	q.head = 0
	if q.space != nil {
		close(q.space)
		q.space = nil
	}
}
