package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnansweredAttemptEnds: an attempt whose credentials the peer never
// answers (control takes our signals; nothing comes back) ends at
// AttemptTimeout and schedules the next one. It used to wait with no
// retry until the peer restarted for its own reasons, and a direct path
// cut and restored stayed on the relay (wgdev TestBridgeFailover, 1 run
// in 8 on a busy machine).
func TestUnansweredAttemptEnds(t *testing.T) {
	p, _, _ := loopbackPeer(func(context.Context, string, []byte) error { return nil },
		func(c *ICEConfig) { c.AttemptTimeout = 300 * time.Millisecond })
	env := p.env
	env.ice = &iceCounts{}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		p.stopTimers()
		p.stopAgent()
		p.queue().wait()
	}()
	start := time.Now()
	p.startAttempt(ctx, "test")
	require.NotNil(t, p.agent)
	giveUp := time.After(5 * time.Second)
	for p.agent != nil {
		select {
		case <-p.box.wake:
			for _, ev := range p.box.take() {
				p.handle(ctx, ev)
			}
		case <-giveUp:
			t.Fatalf("the attempt was still waiting for the peer after %v (AttemptTimeout %v)", time.Since(start), env.cfg.AttemptTimeout)
		}
	}
	assert.GreaterOrEqual(t, time.Since(start), env.cfg.AttemptTimeout)
	assert.NotNil(t, p.retryTimer, "the next attempt is scheduled")
	assert.Equal(t, 1, p.failures)
	assert.Equal(t, [3]uint64{1, 0, 1}, [3]uint64{env.ice.attempts.Load(), env.ice.connected.Load(), env.ice.failed.Load()},
		"one attempt, counted failed")
	p.mu.Lock()
	why := p.why
	p.mu.Unlock()
	assert.Contains(t, why, "never answered our ICE credentials")
}
