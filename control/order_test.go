package control

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/netx"
)

// Stress tests of what happens to one node from two goroutines (or two
// control instances) at once, where the order matters: what peers are
// left with must be the newest.

// eventLog keeps the last peer event an observer got for each node.
type eventLog struct {
	mu      sync.Mutex // guards the following fields
	offline map[string]bool
	events  int
}

func newEventLog() *eventLog { return &eventLog{offline: map[string]bool{}} }

func (l *eventLog) add(ev controlapi.PeerEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.offline[ev.Peer.NodeID] = ev.Peer.Offline
	l.events++
}

// shownOffline lists those of ids whose last event showed them offline.
func (l *eventLog) shownOffline(ids []string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, id := range ids {
		if l.offline[id] {
			out = append(out, id)
		}
	}
	return out
}

// TestPresenceExpiryRacingHeartbeats: nodes whose heartbeats were late
// expire while their next heartbeats arrive. Whichever comes first, once
// the heartbeats are answered the nodes are online, and the last event
// every peer got for each says so: an expiry announced after the
// heartbeat that followed it would leave peers showing a running node
// offline for good (no further event comes while its heartbeats do).
func TestPresenceExpiryRacingHeartbeats(t *testing.T) {
	const ttl = time.Minute // the ticker's sweeps stay out of the way; the test sweeps
	clock := newTestClock(time.Now())
	env := startServer(t, "", func(c *Config) { c.PresenceTTL = ttl; c.Now = clock.Now })
	ctx := ctxT(t)
	log := newEventLog()
	obs := mustRegister(ctx, t, env.url, "observer")
	so, err := controlapi.Connect(ctx, netx.OS, obs.NodeID, obs.NATS, controlapi.Handlers{Peer: log.add})
	require.NoError(t, err)
	defer so.Close()

	const nodes = 24
	type node struct {
		id    string
		epoch uint64
		s     *controlapi.Session
	}
	var all []node
	var ids []string
	for i := range nodes {
		r := mustRegister(ctx, t, env.url, fmt.Sprintf("node-%02d", i))
		s, err := controlapi.Connect(ctx, netx.OS, r.NodeID, r.NATS, controlapi.Handlers{})
		require.NoError(t, err)
		defer s.Close()
		all = append(all, node{r.NodeID, r.Epoch, s})
		ids = append(ids, r.NodeID)
	}

	rounds := 30
	if testing.Short() {
		rounds = 5
	}
	for round := range rounds {
		clock.set(clock.Now().Add(2 * ttl)) // every node's heartbeat is late
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			env.srv.expire(ctx, clock.Now())
		})
		errs := make(chan error, nodes)
		for _, n := range all {
			wg.Go(func() {
				<-start
				if err := n.s.Presence(ctx, true, n.epoch); err != nil {
					errs <- fmt.Errorf("heartbeat of %s: %w", n.id, err)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}

		peers, err := so.Peers(ctx)
		require.NoError(t, err)
		for _, p := range peers {
			if slices.Contains(ids, p.NodeID) {
				require.False(t, p.Offline, "round %d: %s sent its heartbeat, yet its peer list entry is offline", round, p.NodeID)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(log.shownOffline(ids)) > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		require.Empty(t, log.shownOffline(ids), "round %d: the last event peers got for these running nodes says offline", round)
	}
}
