package fabric

import (
	"sync"
	"sync/atomic"
)

// Frames in the fabric are Ethernet frames held in plain byte slices. Most are
// at most one MTU plus the link header, so slices of frameCap bytes are pooled;
// larger frames (jumbo MTUs) are allocated and left to the GC.
const frameCap = 2048

// The pool holds array pointers: a slice converts back to its array
// pointer without allocating, where pooling *[]byte would allocate a new
// slice header on every put.
var framePool = sync.Pool{New: func() any { return new([frameCap]byte) }}

// getFrame returns a slice of length n. Release it with putFrame once the
// frame has been consumed or dropped.
func getFrame(n int) []byte {
	if n > frameCap {
		return make([]byte, n)
	}
	return framePool.Get().(*[frameCap]byte)[:n]
}

// putFrame returns b to the pool. b must not be used afterwards.
func putFrame(b []byte) {
	if cap(b) != frameCap {
		return
	}
	framePool.Put((*[frameCap]byte)(b[:frameCap]))
}

// rxQueue is an interface's receive ring: the one asynchronous boundary on
// every hop. Senders append from any goroutine and never block; a single
// consumer goroutine (owned by the interface) drains everything queued in one
// batch. Without this boundary a host's write could run straight into the
// next host's receive path and back (an ICMP echo reply, a TCP RST), re-entering
// gVisor while it holds its own locks.
type rxQueue struct {
	limit int
	wake  chan struct{} // capacity 1: "there is work"

	mu     sync.Mutex // guards the following fields
	frames [][]byte
	closed bool

	dropped atomic.Uint64 // frames refused because the queue was full
}

func newRXQueue(limit int) *rxQueue {
	return &rxQueue{limit: limit, wake: make(chan struct{}, 1)}
}

// push enqueues f, taking ownership. It reports false (and releases f) when
// the queue is full or closed, like a NIC ring overflowing.
func (q *rxQueue) push(f []byte) bool {
	q.mu.Lock()
	if q.closed || len(q.frames) >= q.limit {
		q.mu.Unlock()
		q.dropped.Add(1)
		putFrame(f)
		return false
	}
	q.frames = append(q.frames, f)
	first := len(q.frames) == 1
	q.mu.Unlock()
	if first {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// drain swaps out everything queued, handing the caller a batch and taking
// back the previous batch's slice (emptied) for reuse.
func (q *rxQueue) drain(spare [][]byte) [][]byte {
	q.mu.Lock()
	batch := q.frames
	q.frames = spare[:0]
	q.mu.Unlock()
	return batch
}

// close refuses further frames and releases whatever is queued.
func (q *rxQueue) close() {
	q.mu.Lock()
	q.closed = true
	batch := q.frames
	q.frames = nil
	q.mu.Unlock()
	for _, f := range batch {
		putFrame(f)
	}
}
