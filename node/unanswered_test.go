package node

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/pion/ice/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/key"
)

// TestUnansweredAttemptEnds: an attempt whose credentials the peer never
// answers (control takes our signals; nothing comes back) ends at
// AttemptTimeout and schedules the next one. It used to wait with no
// retry until the peer restarted for its own reasons, and a direct path
// cut and restored stayed on the relay (wgdev TestBridgeFailover, 1 run
// in 8 on a busy machine).
func TestUnansweredAttemptEnds(t *testing.T) {
	ours, theirs := key.NewPrivate(), key.NewPrivate()
	env := &peerEnv{
		priv: ours, pub: ours.Public(), log: slog.New(slog.DiscardHandler), now: time.Now,
		signal: func(context.Context, string, []byte) error { return nil },
		agentOpt: []ice.AgentOption{
			ice.WithNetworkTypes([]ice.NetworkType{ice.NetworkTypeUDP4}),
			ice.WithCandidateTypes([]ice.CandidateType{ice.CandidateTypeHost}),
			ice.WithMulticastDNSMode(ice.MulticastDNSModeDisabled),
			ice.WithIncludeLoopback(),
			ice.WithIPFilter(func(ip net.IP) bool { return ip.IsLoopback() }),
		},
	}
	env.cfg.defaults()
	env.cfg.AttemptTimeout = 300 * time.Millisecond
	p := &peer{env: env, info: control.Peer{Name: "b", NodeID: "b", PublicKey: theirs.Public()},
		path: &Path{}, events: make(chan peerEvent, 64), controlling: true}
	p.initSignals()
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		p.stopTimers()
		p.stopAgent()
		p.signals.wait()
	}()
	start := time.Now()
	p.startAttempt(ctx, "test")
	require.NotNil(t, p.agent)
	giveUp := time.After(5 * time.Second)
	for p.agent != nil {
		select {
		case ev := <-p.events:
			p.handle(ctx, ev)
		case <-giveUp:
			t.Fatalf("the attempt was still waiting for the peer after %v (AttemptTimeout %v)", time.Since(start), env.cfg.AttemptTimeout)
		}
	}
	assert.GreaterOrEqual(t, time.Since(start), env.cfg.AttemptTimeout)
	assert.NotNil(t, p.retryTimer, "the next attempt is scheduled")
	assert.Equal(t, 1, p.failures)
	p.mu.Lock()
	why := p.why
	p.mu.Unlock()
	assert.Contains(t, why, "never answered our ICE credentials")
}
