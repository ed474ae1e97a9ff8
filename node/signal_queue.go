package node

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// signalQueue carries a peer's sealed signals to control in the order
// the actor made them, so the actor never waits on control: a signal is
// a request that control answers, and a busy or reconnecting control
// answered in seconds, each second the actor could not run its timers or
// take an attempt's outcome (an attempt stayed "checking" well past
// AttemptTimeout). A goroutine drains the queue while it holds signals
// and exits when it is empty, so an idle peer costs none.
type signalQueue struct {
	send    func(ctx context.Context, payload []byte) error
	log     *slog.Logger
	session atomic.Uint64 // the actor's current session; older signals are dropped unsent

	mu      sync.Mutex
	items   []queuedSignal
	running bool
	wg      sync.WaitGroup
}

type queuedSignal struct {
	session uint64
	payload []byte
}

// maxQueuedSignals bounds a peer's backlog: an attempt sends its
// credentials and a handful of candidates, so a full queue means control
// has not answered for a long time, and what is queued is stale.
const maxQueuedSignals = 64

// signalTimeout bounds how long one signal waits for control's answer.
const signalTimeout = 5 * time.Second

var errSignalQueueFull = errors.New("signal queue full: control has not answered the earlier signals")

// push queues payload, sealed under session, and starts the drain if it
// is not running. ctx ends the drain (the peer's context).
func (q *signalQueue) push(ctx context.Context, session uint64, payload []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) >= maxQueuedSignals {
		return errSignalQueueFull
	}
	q.items = append(q.items, queuedSignal{session: session, payload: payload})
	if !q.running {
		q.running = true
		q.wg.Add(1)
		go q.drain(ctx)
	}
	return nil
}

func (q *signalQueue) drain(ctx context.Context) {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		if len(q.items) == 0 || ctx.Err() != nil {
			q.items, q.running = nil, false
			q.mu.Unlock()
			return
		}
		it := q.items[0]
		q.items = q.items[1:]
		q.mu.Unlock()
		if it.session < q.session.Load() {
			continue // its attempt is gone; the peer would refuse it anyway
		}
		sctx, cancel := context.WithTimeout(ctx, signalTimeout)
		err := q.send(sctx, it.payload)
		cancel()
		if err != nil && ctx.Err() == nil {
			q.log.Debug("signal", "err", err)
		}
	}
}

// wait returns once the drain has stopped: after ctx ended, or when the
// queue is empty.
func (q *signalQueue) wait() { q.wg.Wait() }
