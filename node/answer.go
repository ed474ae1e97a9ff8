package node

import (
	"sync"
	"sync/atomic"
	"time"
)

// Answering a peer's initiation while our own packet opens a handshake:
// wireguard-go answers an initiation in two steps under separate holds of
// its handshake lock (consume it, then make the response), and a packet
// of ours to that peer read from the interface in between makes it start
// an initiation of its own, which replaces the consumed one: the answer
// fails ("handshake initiation must be consumed first"), the peer's
// resends of its initiation are replays to it, and when the peer leads it
// drops ours as crossing its own, until its glare yield (1.3 s) or
// WireGuard's retry (5 s). A restarted node's first exchange met this in
// a few runs in a thousand (node TestRestartFirstExchange, virtual time).
//
// answerGate keeps the two apart for a peer with no session (the race's
// case: one of ours would carry our packets instead). The Bind holds the
// peer's new initiation back from WireGuard while the interface's reader
// is out of Read with packets for WireGuard (an initiation of ours they
// open is then made before the peer's is consumed, and its answer
// replaces ours, as when two cross on the wire); and the reader, whose
// Read returns packets to that peer, waits until our answer goes out, or
// answerHold passes (WireGuard refused the initiation). The reader is
// wireguard-go's only one: the wait delays packets to every peer, so it
// is bounded, once per 100 ms per peer, and only for a peer without a
// session. A node whose Device has its own interface has no reader here:
// the Bind does not wait for one.
type answerGate struct {
	// until is the latest end of a hold (Unix ns); 0: none.
	until atomic.Int64
	// busy: the interface's reader is out of Read with packets for
	// WireGuard (set by the reader only).
	busy atomic.Bool
	// waiting counts the Bind's and the reader's waits; changed is
	// closed to wake them.
	waiting atomic.Int32
	mu      sync.Mutex
	changed chan struct{}
}

const (
	// answerHold bounds how long the reader holds the packets of one
	// Read (to every peer: wireguard-go has one reader) while WireGuard
	// answers an initiation: the answer goes out within microseconds,
	// unless WireGuard refused the initiation.
	answerHold = 10 * time.Millisecond
	// answerSettle bounds how long the Bind holds a peer's initiation
	// for the reader to return to Read.
	answerSettle = 5 * time.Millisecond
	// answerEvery spaces a peer's holds: a peer that sends many
	// initiations (a flood, or forged ones) has its packets held once at
	// most in this time.
	answerEvery = 100 * time.Millisecond
	// answerSession: a peer something authenticated came from this
	// recently has a session (WireGuard keeps one 180 s), which our
	// packets use instead of opening a handshake: nothing to keep apart,
	// and no hold. The race is a fresh peer's (a restart, a peer just
	// added).
	answerSession = 180 * time.Second
)

// hold records that the peer's initiation goes to WireGuard at now (one
// the Bind let through: not a copy of the last, see duplicate), and
// reports whether the Bind must settle first: for a peer with no session,
// not within answerEvery of the last hold.
func (g *answerGate) hold(p *Path, now int64) bool {
	if auth := p.authAt.Load(); auth != 0 && now-auth < int64(answerSession) {
		return false
	}
	if now-p.heldAt.Load() < int64(answerEvery) {
		return false
	}
	p.heldAt.Store(now)
	end := now + int64(answerHold)
	p.answerBy.Store(end)
	for {
		u := g.until.Load()
		if u >= end || g.until.CompareAndSwap(u, end) {
			return true
		}
	}
}

// settle waits, at most answerSettle, until the interface's reader is not
// out of Read with packets for WireGuard.
func (g *answerGate) settle() {
	if !g.busy.Load() {
		return
	}
	g.wait(time.Now().Add(answerSettle), func() bool { return !g.busy.Load() })
}

// answered records that our answer to the peer went out.
func (g *answerGate) answered(p *Path) {
	if p.answerBy.Swap(0) != 0 {
		g.wake()
	}
}

// enterRead: the reader is in Read again.
func (g *answerGate) enterRead() {
	g.busy.Store(false)
	if g.waiting.Load() > 0 {
		g.wake()
	}
}

// wake wakes every wait.
func (g *answerGate) wake() {
	g.mu.Lock()
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
	g.mu.Unlock()
}

// wait returns once done reports true, or at deadline.
func (g *answerGate) wait(deadline time.Time, done func() bool) {
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	for !done() {
		g.mu.Lock()
		if g.changed == nil {
			g.changed = make(chan struct{})
		}
		ch := g.changed
		g.mu.Unlock()
		if done() {
			return
		}
		d := time.Until(deadline)
		if d <= 0 {
			return
		}
		t := time.NewTimer(d)
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
}

// holdForAnswers is the reader's side, as Read returns n packets: while
// one goes to a peer whose initiation WireGuard is answering, it waits
// for the answer, not busy meanwhile (nothing it read reaches WireGuard
// before); answerHold in all, however many peers' holds follow one
// another. It leaves the reader busy.
func (u *unreachableTUN) holdForAnswers(bufs [][]byte, sizes []int, offset, n int) {
	g := u.gate
	g.busy.Store(true)
	var limit int64
	for {
		until := g.until.Load()
		if until == 0 {
			return
		}
		now := time.Now().UnixNano()
		if now >= until {
			g.until.CompareAndSwap(until, 0)
			return
		}
		if limit == 0 {
			limit = now + int64(answerHold)
		} else if now >= limit {
			return
		}
		p, by := u.answering(bufs, sizes, offset, n, now)
		if p == nil {
			return
		}
		g.busy.Store(false)
		g.wake()
		g.wait(time.Unix(0, min(by, limit)), func() bool { return p.answerBy.Load() == 0 })
		g.busy.Store(true)
	}
}

// answering returns a path among the packets' destinations whose peer's
// initiation WireGuard is answering at now, and when its hold ends.
func (u *unreachableTUN) answering(bufs [][]byte, sizes []int, offset, n int, now int64) (*Path, int64) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	for i := range min(n, len(bufs), len(sizes)) {
		_, dst, ok := ipAddrs(bufs[i][offset : offset+sizes[i]]) //nolint:gosec // i < len(sizes): the range above
		if !ok {
			continue
		}
		if p := u.paths[dst]; p != nil {
			if by := p.answerBy.Load(); by > now {
				return p, by
			}
		}
	}
	return nil, 0
}
