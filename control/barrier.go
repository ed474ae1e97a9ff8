package control

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// An instance sharing the registry with others answers peer lists from
// its view, which follows the bucket through a watch and so may lag
// another instance's write. A node
// that applied a PeerAdded event (published after that write) and then
// asks for its list must find the peer in it, or its reconcile removes the
// peer until its next event. So before the view is read for a list, the
// instance reads the bucket's last revision (the stream's state: the same
// cost for any number of nodes) and waits, bounded, until its watch, which
// follows every key, has applied it: a read barrier. One read serves every
// request that arrived before it was sent: at most one is in flight, and
// the requests arriving meanwhile share the next. A registration's own
// peers go without it: on a replicated bucket it costs registrations a
// quarter of their throughput (docs/PERFORMANCE.md), and the node's
// session asks for its list, behind the barrier, next.

// defaultBarrierWait bounds a read barrier: past it the list is served
// from the view as it is, with a warning.
const defaultBarrierWait = 2 * time.Second

// barrierWarnEvery is the least time between two warnings of one kind:
// behind a stuck watch every request waits out the bound, and under load
// one warning each would flood the log.
const barrierWarnEvery = 10 * time.Second

// readBarrier makes the view catch up with the shared store. A nil
// *readBarrier (a store of this instance alone) is a no-op.
type readBarrier struct {
	read  func(ctx context.Context) (uint64, error) // the store's last node revision
	wait  time.Duration
	stop  <-chan struct{} // closed when the server closes: waits end
	log   *slog.Logger
	now   func() time.Time // the clock of the warnings' rate limit
	reads atomic.Uint64    // calls of read

	lagWarn, readWarn warnLimit

	mu       sync.Mutex    // guards the following fields
	applied  uint64        // the last revision the watch applied to the view
	advanced chan struct{} // closed, and replaced, when applied grows
	inflight *barrierRead  // the read under way; nil: none
	next     *barrierRead  // the read not yet sent, that new requests join
}

// barrierRead is one read of the store's last revision, shared by the
// requests that joined it before it was sent.
type barrierRead struct {
	done chan struct{} // closed once rev and err are set
	rev  uint64
	err  error
}

// newReadBarrier makes a barrier that reads the store's last revision
// with read and waits at most wait (if zero, defaultBarrierWait), or
// until stop is closed.
func newReadBarrier(read func(ctx context.Context) (uint64, error), wait time.Duration, stop <-chan struct{}, log *slog.Logger) *readBarrier {
	if wait <= 0 {
		wait = defaultBarrierWait
	}
	return &readBarrier{read: read, wait: wait, stop: stop, log: log, now: time.Now, advanced: make(chan struct{})}
}

// warnLimit lets one warning through per barrierWarnEvery; the next one
// let through counts those held back meanwhile.
type warnLimit struct {
	mu   sync.Mutex // guards the following fields
	last time.Time  // when the last one was let through; zero: never
	held int        // held back since
}

// allow reports whether a warning at now goes out, and how many were
// held back before it.
func (l *warnLimit) allow(now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < barrierWarnEvery {
		l.held++
		return false, 0
	}
	l.last, suppressed, l.held = now, l.held, 0
	return true, suppressed
}

// warn logs msg through l: at most one per barrierWarnEvery, with the
// count of those held back since the last.
func (b *readBarrier) warn(l *warnLimit, msg string, args ...any) {
	ok, suppressed := l.allow(b.now())
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	b.log.Warn(msg, args...)
}

// advance records that the watch applied the entry at revision rev.
func (b *readBarrier) advance(rev uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if rev > b.applied {
		b.applied = rev
		close(b.advanced)
		b.advanced = make(chan struct{})
	}
}

// appliedRev is the last revision the watch applied to the view: the
// view holds every change up to it. 0 for a nil barrier.
func (b *readBarrier) appliedRev() uint64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applied
}

// sync returns once the view holds every change the store held when sync
// was called, or after b.wait (logging how far behind the view is), or
// when ctx ends or the server closes. what names the request, for the log.
func (b *readBarrier) sync(ctx context.Context, what string) {
	if b == nil {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, b.wait)
	defer cancel()
	rev, err := b.target(ctx)
	if err != nil {
		b.warn(&b.readWarn, "registry view served without catching up: reading the registry's revision failed", "for", what, "err", err, "waited", time.Since(start))
		return
	}
	for {
		b.mu.Lock()
		applied, advanced := b.applied, b.advanced
		b.mu.Unlock()
		if applied >= rev {
			return
		}
		select {
		case <-advanced:
		case <-b.stop:
			return
		case <-ctx.Done():
			b.warn(&b.lagWarn, "registry view served behind the registry: its watch lags", "for", what, "revisions_behind", rev-applied, "applied", applied, "registry", rev, "waited", time.Since(start))
			return
		}
	}
}

// target is the store's last revision, read after target was called:
// it joins the read not yet sent, or sends one once the read in flight
// (sent before this call, perhaps before the change this call must see)
// is answered.
func (b *readBarrier) target(ctx context.Context) (uint64, error) {
	b.mu.Lock()
	r := b.next
	if r != nil {
		b.mu.Unlock()
		select {
		case <-r.done:
			return r.rev, r.err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	r = &barrierRead{done: make(chan struct{})}
	b.next = r
	prev := b.inflight
	b.mu.Unlock()
	// This call leads r: it sends the read, whose answer every request
	// that joined r gets.
	if prev != nil {
		select {
		case <-prev.done:
		case <-ctx.Done():
			r.err = ctx.Err()
		}
	}
	b.mu.Lock()
	b.next = nil
	if r.err == nil {
		b.inflight = r
	}
	b.mu.Unlock()
	if r.err == nil {
		b.reads.Add(1)
		r.rev, r.err = b.read(ctx)
		b.mu.Lock()
		b.inflight = nil
		b.mu.Unlock()
	}
	close(r.done)
	return r.rev, r.err
}
