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

// TestSessionSettled: a session is settled once the peer has sent
// something authenticated (its response to ours, its data or keepalive
// after our response) since the last initiation either way; the peer's
// initiation counts from when it passes the Bind, before WireGuard reads
// it (a trimmed peer's restore takes milliseconds).
func TestSessionSettled(t *testing.T) {
	b, p, _ := relayedPath(t)
	init, resp := handshakeMessages()
	init[8] = 0xaa
	keepalive := make([]byte, transportMin)
	keepalive[0] = 4

	assert.False(t, p.sessionSettled(), "no session yet")

	// We answer the peer's initiation: not settled until its first
	// transport message confirms the session.
	b.DeliverRelayed(p.Key, init)
	assert.False(t, p.sessionSettled(), "the peer's initiation is on its way to WireGuard")
	b.noteSent(p, [][]byte{resp})
	assert.False(t, p.sessionSettled(), "our response is not the end: the peer has not used the session")
	time.Sleep(time.Millisecond) // a later arrival, on coarse clocks too
	b.noteReceived(p, keepalive)
	assert.True(t, p.sessionSettled(), "the peer's keepalive confirms the session")

	// Ours (a rekey): under way until the peer's response.
	time.Sleep(time.Millisecond)
	b.noteSent(p, [][]byte{init})
	assert.False(t, p.sessionSettled(), "our initiation is unanswered")
	time.Sleep(time.Millisecond)
	b.noteReceived(p, resp)
	assert.True(t, p.sessionSettled(), "answered")
}

// TestKeepaliveWaitsForHandshake: a lazy peer that goes direct turns
// WireGuard's keepalive on only once a session is up with no handshake
// under way, or after handshakeSettle. wireguard-go sends a keepalive the
// moment it is turned on, which, with no session, opens a second
// handshake that races the first inside wireguard-go (see
// keepaliveWhenSettled); in a 100-node lab that left about one run in six
// with a ping unanswered for 10 s.
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
	keepalive := make([]byte, transportMin)
	keepalive[0] = 4
	b := NewBind(nil)
	p.path.duplicate(init, time.Now().UnixNano()) // the peer's initiation passed the Bind
	p.keepaliveWhenSettled(ctx)
	assert.Empty(t, calls, "keepalive turned on while the peer's handshake is being answered")
	require.NotNil(t, p.settleTimer, "nothing will look again")

	ev := waitEvent(t, p)
	assert.True(t, ev.settle)
	p.handle(ctx, ev)
	assert.Empty(t, calls, "still under way")

	time.Sleep(time.Millisecond)
	b.noteReceived(p.path, keepalive) // the peer used the session
	p.handle(ctx, waitEvent(t, p))
	assert.Equal(t, []bool{true}, calls, "keepalive on once the session is confirmed")

	// Settled already: at once.
	calls, p.keepaliveOn, p.settleFrom = nil, false, time.Time{}
	p.keepaliveWhenSettled(ctx)
	assert.Equal(t, []bool{true}, calls)

	// No session for handshakeSettle: on regardless.
	calls, p.keepaliveOn = nil, false
	time.Sleep(time.Millisecond)
	p.path.initAt.Store(time.Now().UnixNano())
	p.settleFrom = time.Now().Add(-handshakeSettle)
	p.keepaliveWhenSettled(ctx)
	assert.Equal(t, []bool{true}, calls, "waited past handshakeSettle")

	// A look that comes after the peer went idle changes nothing.
	calls, p.keepaliveOn, p.settleFrom = nil, false, time.Time{}
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
