package node

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/latticelab/lattice/key"
)

// probeCounter is a RelayClient whose probes only count.
type probeCounter struct{ probes atomic.Int32 }

func (c *probeCounter) Send(key.Public, []byte) error { return nil }
func (c *probeCounter) Close() error                  { return nil }
func (c *probeCounter) Probe(context.Context, time.Duration) error {
	c.probes.Add(1)
	return nil
}

// TestProbeKickDeferred: a kick within probeEvery of the last probe runs
// probeEvery after it (it was dropped, and a NAT reboot that silenced a
// second path 9.95 s after the first left the relay connection dead); a
// burst of kicks makes one deferred probe, not one each.
func TestProbeKickDeferred(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rc := &probeCounter{}
		n := &Node{log: slog.New(slog.DiscardHandler), relay: rc,
			probeKick: make(chan struct{}, 1), probesDone: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		defer func() { cancel(); <-n.probesDone }()
		go n.probeLoop(ctx)

		n.kickProbes()
		synctest.Wait()
		assert.EqualValues(t, 1, rc.probes.Load(), "the first kick probes at once")

		time.Sleep(probeEvery - 50*time.Millisecond)
		for range 3 {
			n.kickProbes()
			synctest.Wait()
		}
		assert.EqualValues(t, 1, rc.probes.Load(), "kicks within probeEvery wait")

		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		assert.EqualValues(t, 2, rc.probes.Load(), "the deferred kick probes probeEvery after the last probe")

		time.Sleep(time.Minute)
		synctest.Wait()
		assert.EqualValues(t, 2, rc.probes.Load(), "no kick, no probe")
	})
}
