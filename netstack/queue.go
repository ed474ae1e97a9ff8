package netstack

import "sync"

// handoff passes items from any number of producers to one consumer, in
// batches: the consumer takes everything queued at once, so the longer it
// spends on a batch the larger the next one, as with a NIC polled by NAPI.
// It is bounded, and never blocks a producer.
type handoff[T any] struct {
	limit int
	done  <-chan struct{}
	// ready holds a token when items turned non-empty since the consumer
	// last looked.
	ready chan struct{}

	mu     sync.Mutex // guards the following fields
	items  []T
	closed bool
}

func (q *handoff[T]) init(limit int, done <-chan struct{}) {
	q.limit = limit
	q.done = done
	q.ready = make(chan struct{}, 1)
	q.items = make([]T, 0, limit)
}

// push queues as many items as fit, in order, and returns how many did;
// the caller keeps ownership of the rest.
func (q *handoff[T]) push(items []T) int {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return 0
	}
	wasEmpty := len(q.items) == 0
	n := min(len(items), q.limit-len(q.items))
	q.items = append(q.items, items[:n]...)
	q.mu.Unlock()
	if wasEmpty && n > 0 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return n
}

// take blocks until items are queued and returns them all, handing dst
// (empty, with capacity) to the queue in exchange; the two slices swap
// roles on every call, so the steady state allocates nothing. It returns
// false once the queue is closed, or when it would block after done.
func (q *handoff[T]) take(dst []T) ([]T, bool) {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return dst, false
		}
		if len(q.items) > 0 {
			got := q.items
			q.items = dst[:0]
			q.mu.Unlock()
			return got, true
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-q.done:
			return dst, false
		}
	}
}

// close makes later pushes fail and returns what was queued, for the
// caller to release.
func (q *handoff[T]) close() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	rest := q.items
	q.items = nil
	return rest
}
