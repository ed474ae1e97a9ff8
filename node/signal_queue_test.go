package node

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSignalQueueDoesNotWaitForControl: while control sits on a signal,
// the actor's pushes return at once; the signals then leave in order,
// those of a session the actor has left are dropped unsent, a backlog
// past maxQueuedSignals is refused, and cancelling the peer's context
// ends the drain even in the middle of a send.
func TestSignalQueueDoesNotWaitForControl(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var sent []string
	q := &signalQueue{log: slog.New(slog.DiscardHandler)}
	q.send = func(ctx context.Context, b []byte) error {
		if string(b) == "slow" {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		mu.Lock()
		sent = append(sent, string(b))
		mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q.session.Store(1)
	start := time.Now()
	require.NoError(t, q.push(ctx, 1, []byte("slow")))
	<-entered // control now sits on it
	require.NoError(t, q.push(ctx, 1, []byte("old-1")))
	q.session.Store(2) // a new attempt: session 1's candidates are moot
	require.NoError(t, q.push(ctx, 2, []byte("creds-2")))
	require.NoError(t, q.push(ctx, 2, []byte("cand-2")))
	assert.Less(t, time.Since(start), time.Second, "push waited for control")
	close(release)
	q.wait()
	assert.Equal(t, []string{"slow", "creds-2", "cand-2"}, sent, "in order, the stale one dropped")

	// A control that never answers: the queue fills, then refuses.
	q.send = func(ctx context.Context, _ []byte) error { <-ctx.Done(); return ctx.Err() }
	var err error
	for i := 0; i < maxQueuedSignals+2; i++ { // one may be out already
		if err = q.push(ctx, 2, []byte("x")); err != nil {
			break
		}
	}
	assert.ErrorIs(t, err, errSignalQueueFull)
	cancel()
	done := make(chan struct{})
	go func() { q.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the drain outlived its context")
	}
}
