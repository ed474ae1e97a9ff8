package link

import (
	"math"
	"math/rand/v2"
	"time"
)

// The scheduler holds delayed packets until their delivery time. Packets that
// keep their order (everything but Reorder's held-back ones) get
// non-decreasing delivery times, because each is scheduled no earlier than
// the one before; they wait in a FIFO ring, O(1) per packet. Held-back
// packets wait in a small min-heap. The scheduler goroutine merges the two by
// delivery time, so delivery is in timestamp order, on a single timer.

// Limits of the scheduler.
const (
	// maxPendingBytes caps the bytes a pipe holds, whatever the
	// impairments: a sender flooding a long-latency link without a Rate
	// would otherwise grow the queue without bound. Beyond it packets are
	// counted in DroppedQueue.
	maxPendingBytes = 256 << 20

	// maxBatch bounds how many packets the scheduler takes out of the
	// queue per lock hold, so Send is never stalled behind a long batch.
	maxBatch = 256

	// Go timers on Linux wake up to about 1ms late when the process is
	// idle (the netpoller sleeps in whole milliseconds) and on time when it
	// is busy. The scheduler learns the current lateness and arms its
	// timer that much early, delivering whatever falls due within that
	// window: delivery times then stay centred on the target instead of
	// trailing it by up to a millisecond.
	initialEarly = 500 * time.Microsecond
	minEarly     = 20 * time.Microsecond
	maxEarly     = time.Millisecond

	// spacing keeps in-order packets at least a nanosecond apart, so no
	// two are delivered at one instant. Without it, a link with latency
	// and no Rate delivered a whole TCP flight at one instant, exactly an
	// RTT after the previous one, in virtual time, and gVisor's receive
	// buffer tuner (which grows the window from the bytes the application
	// copied in the previous RTT) settled at a fixed point: 1 MiB over a
	// 100 ms RTT took 2.9 s against 0.70 s with the buffer fixed. One
	// nanosecond apart, the same transfer takes 0.70 s, as on a real link,
	// where serialization always spreads a flight (docs/VIRTUAL_TIME.md).
	spacing = 1 // ns
)

// nanotime returns monotonic nanoseconds since the pipe was made. The epoch
// is taken in New, never at package load: inside a testing/synctest bubble
// time.Now reads the bubble's clock, and an epoch read outside it would put
// every delivery decades away.
func (p *Pipe) nanotime() int64 { return int64(time.Since(p.epoch)) }

// virtualClock reports whether now was read inside a testing/synctest
// bubble: the runtime gives a bubble's time no monotonic reading
// (runtime.time_runtimeNow), and its timers fire to the nanosecond.
func virtualClock(now time.Time) bool {
	return now == now.Round(0) //nolint:staticcheck // == on purpose: Round(0) strips the monotonic reading, which Equal ignores
}

// queue is the scheduler state. It is guarded by Pipe.mu.
type queue struct {
	fifo ring     // in-order packets, delivery times non-decreasing
	held heldHeap // Reorder's held-back packets

	lastAt   int64 // delivery time of the last in-order packet
	linkFree int64 // when the bandwidth limiter finishes its backlog
	carry    int64 // sub-nanosecond serialization remainder, in bit·ns/s
	bytes    int64 // bytes pending
	armed    int64 // delivery time the goroutine will next wake for
	seq      uint64
	started  bool // run goroutine started
}

func (q *queue) init() {
	q.armed = math.MaxInt64
	q.lastAt = math.MinInt64 / 2 // no packet yet: the first is not spaced
}

func (q *queue) len() int { return q.fifo.len() + len(q.held) }

// nextAt returns the earliest delivery time, or math.MaxInt64 when empty.
func (q *queue) nextAt() int64 {
	next := int64(math.MaxInt64)
	if q.fifo.len() > 0 {
		next = q.fifo.peek().at
	}
	if len(q.held) > 0 {
		next = min(next, q.held[0].at)
	}
	return next
}

// popDue removes and returns the earliest packet if it is due by limit.
func (q *queue) popDue(limit int64) ([]byte, bool) {
	useFIFO := q.fifo.len() > 0 && (len(q.held) == 0 || q.fifo.peek().at <= q.held[0].at)
	var e entry
	switch {
	case useFIFO && q.fifo.peek().at <= limit:
		e = q.fifo.pop()
	case !useFIFO && len(q.held) > 0 && q.held[0].at <= limit:
		e = q.held.pop()
	default:
		return nil, false
	}
	q.bytes -= int64(len(e.pkt))
	return e.pkt, true
}

// drain removes every pending packet.
func (q *queue) drain() [][]byte {
	var out [][]byte
	for q.fifo.len() > 0 {
		out = append(out, q.fifo.pop().pkt)
	}
	for len(q.held) > 0 {
		out = append(out, q.held.pop().pkt)
	}
	q.bytes = 0
	q.fifo.shrink()
	return out
}

// scheduleLocked queues pkt (and a copy of it if dup) for delayed delivery,
// drawing reorder and jitter from r (nil if s draws nothing). It reports
// false if pkt was tail-dropped; the caller counts and releases it. p.mu
// must be held and the pipe open.
func (p *Pipe) scheduleLocked(s *shape, r *rand.PCG, pkt []byte, dup bool) bool {
	im, q := &s.im, &p.q
	held := im.Reorder > 0 && chance(r, im.Reorder)
	delay := int64(im.Latency)
	if im.Jitter > 0 {
		delay += int64((2*uniform(r) - 1) * float64(im.Jitter))
		delay = max(delay, 0)
	}

	size := int64(len(pkt))
	if dup {
		size *= 2
	}
	if q.bytes+size > maxPendingBytes {
		return false
	}
	now := p.nanotime()
	at := now
	if r := int64(im.Rate); r > 0 {
		free := max(q.linkFree, now)
		// Bytes still waiting = backlog time × rate. Float math: the
		// product overflows int64 for fast links with deep queues.
		backlog := free - now
		if backlog > 0 && float64(backlog)*float64(r)/8e9+float64(len(pkt)) > float64(s.queueBytes) {
			return false
		}
		bits := int64(len(pkt))*8e9 + q.carry
		free += bits / r
		q.carry = bits % r
		q.linkFree = free
		at = free
	}
	at += delay

	n := int64(1)
	if held {
		at += s.reorderDelay
		p.c.Reordered++
		q.seq++
		q.held.push(entry{at: at, seq: q.seq, pkt: pkt})
		if dup {
			q.seq++
			q.held.push(entry{at: at, seq: q.seq, pkt: clone(pkt)})
		}
	} else {
		at = max(at, q.lastAt+spacing)
		q.lastAt = at
		q.fifo.push(entry{at: at, pkt: pkt})
		if dup {
			q.fifo.push(entry{at: at, pkt: clone(pkt)})
		}
	}
	if dup {
		p.c.Duplicated++
		n++
	}
	q.bytes += size
	p.pending.Add(n)

	if at < q.armed {
		q.armed = at
		if !q.started {
			q.started = true
			p.wg.Add(1)
			go p.run()
		}
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// run is the scheduler goroutine: it sleeps until the earliest packet is
// due, delivers everything due, and repeats until Close.
func (p *Pipe) run() {
	defer p.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	timer.Stop()

	early := int64(initialEarly) // learned timer lateness, ns
	// A virtual clock (a synctest bubble) fires timers to the nanosecond:
	// there is no lateness to learn, and waking early would deliver early.
	virtual := virtualClock(time.Now())
	if virtual {
		early = 0
	}
	var target int64 // when the armed timer should fire
	batch := make([][]byte, 0, maxBatch)
	for {
		next := p.deliverDue(early, batch)
		if next == math.MaxInt64 {
			timer.Stop()
		} else {
			target = next - early
			timer.Reset(time.Duration(target - p.nanotime()))
		}
		select {
		case <-p.quit:
			return
		case <-p.wake:
		case <-timer.C:
			if virtual {
				break
			}
			late := p.nanotime() - target
			late = min(max(late, 0), int64(maxEarly))
			early += (late - early) / 8
			early = min(max(early, int64(minEarly)), int64(maxEarly))
		}
	}
}

// deliverDue delivers, in batches, every packet due within early from now,
// and returns the next delivery time (math.MaxInt64 if none), which it also
// records as the armed time.
func (p *Pipe) deliverDue(early int64, batch [][]byte) int64 {
	for {
		p.dmu.Lock()
		p.mu.Lock()
		limit := p.nanotime() + early
		b := batch[:0]
		for len(b) < maxBatch {
			pkt, ok := p.q.popDue(limit)
			if !ok {
				break
			}
			b = append(b, pkt)
		}
		next := p.q.nextAt()
		if len(b) < maxBatch {
			p.q.armed = next
		}
		if p.q.len() == 0 {
			p.q.fifo.shrink()
		}
		p.pending.Add(-int64(len(b)))
		p.mu.Unlock()
		if len(b) > 0 {
			p.deliverRunLocked(b)
			clear(b)
		}
		p.dmu.Unlock()
		if len(b) < maxBatch {
			return next
		}
	}
}

// entry is a scheduled packet.
type entry struct {
	at  int64  // delivery time, nanotime
	seq uint64 // tie-break in heldHeap: first scheduled, first delivered
	pkt []byte
}

// ring is a growable FIFO of entries.
type ring struct {
	buf  []entry // len is a power of two, or zero
	head int
	n    int
}

func (r *ring) len() int     { return r.n }
func (r *ring) peek() *entry { return &r.buf[r.head] }

func (r *ring) push(e entry) {
	if r.n == len(r.buf) {
		nb := make([]entry, max(2*len(r.buf), 64))
		for i := range r.n {
			nb[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = e
	r.n++
}

func (r *ring) pop() entry {
	e := r.buf[r.head]
	r.buf[r.head] = entry{}
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return e
}

// shrink frees a large buffer once the ring is empty, so a burst does not pin
// its peak memory for the life of the pipe.
func (r *ring) shrink() {
	if r.n == 0 && len(r.buf) > 4096 {
		r.buf, r.head = nil, 0
	}
}

// heldHeap is a min-heap of entries by (at, seq).
type heldHeap []entry

func (h heldHeap) less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}

func (h *heldHeap) push(e entry) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s.less(i, parent) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *heldHeap) pop() entry {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = entry{}
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s.less(l, m) {
			m = l
		}
		if r < len(s) && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
