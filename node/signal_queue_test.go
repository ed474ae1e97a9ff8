package node

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testQueue is a signal queue whose seal writes a signal's name (its
// Ufrag or Candidate) and sequence number, and whose send records them;
// a signal named "slow" waits in send until release is closed.
func testQueue() (q *signalQueue, sent func() []string, entered, release chan struct{}) {
	var mu sync.Mutex
	var out []string
	entered, release = make(chan struct{}), make(chan struct{})
	q = &signalQueue{log: slog.New(slog.DiscardHandler)}
	q.seal = func(s *Signal) ([]byte, error) {
		return []byte(s.Ufrag + s.Candidate + "#" + string(rune('0'+s.Seq))), nil
	}
	q.send = func(ctx context.Context, b []byte) error {
		if strings.HasPrefix(string(b), "slow#") {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		mu.Lock()
		out = append(out, string(b))
		mu.Unlock()
		return nil
	}
	return q, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), out...) }, entered, release
}

func creds(session uint64, name string) *Signal {
	return &Signal{Kind: SignalCredentials, Session: session, Ufrag: name}
}

func cand(session uint64, name, typ string) *Signal {
	return &Signal{Kind: SignalCandidate, Session: session, Candidate: name + " typ " + typ}
}

// TestSignalQueueDoesNotWaitForControl: while control sits on a signal,
// the actor's pushes return at once; the signals then leave in order,
// those of a session the actor has left are dropped unsent, a backlog
// past maxQueuedSignals is refused, and cancelling the peer's context
// ends the drain even in the middle of a send.
func TestSignalQueueDoesNotWaitForControl(t *testing.T) {
	q, sent, entered, release := testQueue()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q.session.Store(1)
	start := time.Now()
	require.NoError(t, q.push(ctx, creds(1, "slow")))
	<-entered // control now sits on it
	require.NoError(t, q.push(ctx, cand(1, "old-1", "host")))
	q.session.Store(2) // a new attempt: session 1's candidates are moot
	require.NoError(t, q.push(ctx, creds(2, "creds-2")))
	require.NoError(t, q.push(ctx, cand(2, "cand-2", "host")))
	assert.Less(t, time.Since(start), time.Second, "push waited for control")
	close(release)
	q.wait()
	assert.Equal(t, []string{"slow#1", "creds-2#1", "cand-2 typ host#2"}, sent(), "in order, the stale one dropped")

	// A control that never answers: the queue fills, then refuses.
	q.send = func(ctx context.Context, _ []byte) error { <-ctx.Done(); return ctx.Err() }
	var err error
	for i := 0; i < maxQueuedSignals+2; i++ { // one may be out already
		if err = q.push(ctx, cand(2, "x", "host")); err != nil {
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

// TestSignalQueueOrder: what waits behind a signal out at control leaves
// credentials first and in order, and of a session's candidates waiting
// before the next credentials, server-reflexive ones before host ones;
// each is numbered as it leaves, so the peer sees its sequence grow.
func TestSignalQueueOrder(t *testing.T) {
	tests := []struct {
		name    string
		waiting []*Signal // behind "slow", session 1's credentials
		want    []string
	}{
		{"server-reflexive ahead of host",
			[]*Signal{cand(1, "lo", "host"), cand(1, "lan", "host"), cand(1, "wan", "srflx")},
			[]string{"slow#1", "wan typ srflx#2", "lo typ host#3", "lan typ host#4"}},
		{"host only: in order",
			[]*Signal{cand(1, "lo", "host"), cand(1, "lan", "host")},
			[]string{"slow#1", "lo typ host#2", "lan typ host#3"}},
		{"not past credentials",
			[]*Signal{cand(1, "lan", "host"), creds(1, "again"), cand(1, "wan", "srflx")},
			[]string{"slow#1", "lan typ host#2", "again#3", "wan typ srflx#4"}},
		{"a new session numbers from 1",
			[]*Signal{cand(1, "lan", "host"), creds(2, "new"), cand(2, "wan", "srflx")},
			[]string{"slow#1", "lan typ host#2", "new#1", "wan typ srflx#2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, sent, entered, release := testQueue()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			q.session.Store(1)
			require.NoError(t, q.push(ctx, creds(1, "slow")))
			<-entered
			for _, s := range tt.waiting {
				require.NoError(t, q.push(ctx, s))
			}
			close(release)
			q.wait()
			assert.Equal(t, tt.want, sent())
		})
	}
}
