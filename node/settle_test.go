package node

import (
	"context"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// TestHandshakeSettling: a handshake is under way from an initiation
// either way until something authenticated comes from the peer (its
// response to ours, its data or keepalive after our response), or
// handshakeSettle has passed.
func TestHandshakeSettling(t *testing.T) {
	b, p, _ := relayedPath(t)
	init, resp := handshakeMessages()
	keepalive := make([]byte, transportMin)
	keepalive[0] = 4
	now := func() int64 { return time.Now().UnixNano() }

	assert.False(t, p.settling(now()), "no handshake yet")

	// We answer the peer's initiation: under way until its first
	// transport message confirms the session.
	b.noteReceived(p, init)
	assert.True(t, p.settling(now()), "the peer's initiation reached WireGuard")
	b.noteSent(p, [][]byte{resp})
	assert.True(t, p.settling(now()), "our response is not the end: the peer has not used the session")
	b.noteReceived(p, keepalive)
	assert.False(t, p.settling(now()), "the peer's keepalive confirms the session")

	// Ours: under way until the peer's response.
	time.Sleep(time.Millisecond) // a later initiation, on coarse clocks too
	b.noteSent(p, [][]byte{init})
	assert.True(t, p.settling(now()), "our initiation is unanswered")
	assert.False(t, p.settling(now()+int64(handshakeSettle)), "unanswered for WireGuard's retry interval: no longer waited for")
	b.noteReceived(p, resp)
	assert.False(t, p.settling(now()), "answered")
}

// TestKeepaliveWaitsForHandshake: a lazy peer that goes direct while a
// handshake with it is under way turns WireGuard's keepalive on only once
// the handshake has settled. wireguard-go sends a keepalive the moment it
// is turned on, which, with no session yet, opens a second handshake that
// races the first inside wireguard-go (see keepaliveWhenSettled); in a
// 100-node lab that left about one run in three with a ping unanswered for
// 10 s.
func TestKeepaliveWaitsForHandshake(t *testing.T) {
	var calls []bool
	env := &peerEnv{log: slog.New(slog.DiscardHandler), now: time.Now,
		keepalive: func(_ key.Public, on bool) { calls = append(calls, on) }}
	env.cfg.defaults()
	env.cfg.Lazy = true
	p := &peer{env: env, info: controlapi.Peer{Name: "b", NodeID: "b", PublicKey: key.NewPrivate().Public()},
		path: &Path{}, box: newMailbox(), attempt: &attempt{}}
	p.connected = 7
	p.path.direct.Store(new(netip.MustParseAddrPort("10.0.0.2:51820")))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	defer p.stopTimers()

	init, _ := handshakeMessages()
	b := NewBind(nil)
	b.noteReceived(p.path, init) // the peer's initiation, being answered
	p.keepaliveWhenSettled(ctx)
	assert.Empty(t, calls, "keepalive turned on while the peer's handshake is being answered")
	require.NotNil(t, p.settleTimer, "nothing will look again")

	ev := waitEvent(t, p)
	assert.True(t, ev.settle)
	p.handle(ctx, ev)
	assert.Empty(t, calls, "still under way")

	keepalive := make([]byte, transportMin)
	keepalive[0] = 4
	b.noteReceived(p.path, keepalive) // the peer used the session
	p.handle(ctx, waitEvent(t, p))
	assert.Equal(t, []bool{true}, calls, "keepalive on once the session is confirmed")

	// Settled from the start: at once.
	calls, p.keepaliveOn = nil, false
	p.keepaliveWhenSettled(ctx)
	assert.Equal(t, []bool{true}, calls)

	// A look that comes after the peer went idle changes nothing.
	calls, p.keepaliveOn = nil, false
	b.noteReceived(p.path, init)
	p.keepaliveWhenSettled(ctx)
	p.idle = true
	b.noteReceived(p.path, keepalive)
	p.handle(ctx, waitEvent(t, p))
	assert.Empty(t, calls, "an idle peer's keepalive stays off")
}

// waitEvent waits for the next event posted to p's mailbox.
func waitEvent(t *testing.T, p *peer) peerEvent {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if evs := p.box.take(); len(evs) > 0 {
			require.Len(t, evs, 1)
			return evs[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no event posted")
	return peerEvent{}
}
