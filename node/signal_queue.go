package node

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// signalQueue carries a peer's signals to control, so the actor never
// waits on control: a signal is a request that control answers, and a
// busy or reconnecting control answered in seconds, each second the
// actor could not run its timers or take an attempt's outcome (an attempt
// stayed "checking" well past AttemptTimeout). A goroutine drains the
// queue while it holds signals and exits when it is empty, so an idle
// peer costs none.
//
// One signal is out at a time: control's instances share a NATS queue
// group that picks one at random per message, so two out at once could
// arrive in either order, and the peer refuses a sequence number lower
// than one it has seen. Each waits a round trip to control, so the order
// they leave in matters: credentials in the order made, and of the
// candidates waiting, server-reflexive ones before host ones. A host
// candidate helps only a peer on the same network; across NATs the
// server-reflexive one is what the peer's checks need, and it is
// gathered last (a STUN round trip), behind every host candidate.
// Signals are numbered and sealed as they leave, so the peer sees their
// sequence numbers grow.
type signalQueue struct {
	send    func(ctx context.Context, payload []byte) error
	seal    func(*Signal) ([]byte, error)
	log     *slog.Logger
	session atomic.Uint64 // the actor's current session; older signals are dropped unsent

	mu      sync.Mutex
	items   []*Signal
	running bool
	wg      sync.WaitGroup
	// seqSession and seq number the signals sent (drain's).
	seqSession, seq uint64
}

// maxQueuedSignals bounds a peer's backlog: an attempt sends its
// credentials and a handful of candidates, so a full queue means control
// has not answered for a long time, and what is queued is stale.
const maxQueuedSignals = 64

// signalTimeout bounds how long one signal waits for control's answer.
const signalTimeout = 5 * time.Second

var errSignalQueueFull = errors.New("signal queue full: control has not answered the earlier signals")

// push queues s (its Session set; Seq is set as it leaves) and starts the
// drain if it is not running. ctx ends the drain (the peer's context).
func (q *signalQueue) push(ctx context.Context, s *Signal) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) >= maxQueuedSignals {
		return errSignalQueueFull
	}
	q.items = append(q.items, s)
	if !q.running {
		q.running = true
		q.wg.Add(1)
		go q.drain(ctx)
	}
	return nil
}

// nextLocked removes and returns the signal to send next: the oldest,
// unless it is a candidate, in which case the first server-reflexive one
// of the candidates of its session that wait before the next credentials.
func (q *signalQueue) nextLocked() *Signal {
	pick := 0
	if first := q.items[0]; first.Kind == SignalCandidate && isHostCandidate(first.Candidate) {
		for i, s := range q.items[1:] {
			if s.Kind != SignalCandidate || s.Session != first.Session {
				break
			}
			if !isHostCandidate(s.Candidate) {
				pick = i + 1
				break
			}
		}
	}
	s := q.items[pick]
	q.items = append(q.items[:pick], q.items[pick+1:]...)
	return s
}

// isHostCandidate reports whether an ICE candidate line is a host
// candidate (RFC 8839 5.1: "typ host").
func isHostCandidate(c string) bool { return strings.Contains(c, " typ host") }

func (q *signalQueue) drain(ctx context.Context) {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		if len(q.items) == 0 || ctx.Err() != nil {
			q.items, q.running = nil, false
			q.mu.Unlock()
			return
		}
		s := q.nextLocked()
		q.mu.Unlock()
		if s.Session < q.session.Load() {
			continue // its attempt is gone; the peer would refuse it anyway
		}
		if s.Session != q.seqSession {
			q.seqSession, q.seq = s.Session, 0
		}
		q.seq++
		s.Seq = q.seq
		b, err := q.seal(s)
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, signalTimeout)
			err = q.send(sctx, b)
			cancel()
		}
		if err != nil && ctx.Err() == nil {
			q.log.Debug("signal", "err", err)
		}
	}
}

// wait returns once the drain has stopped: after ctx ended, or when the
// queue is empty.
func (q *signalQueue) wait() { q.wg.Wait() }
