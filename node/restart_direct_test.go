package node_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/node"
)

// TestRestartFirstExchange restarts each node of a direct pair with the
// same identity and times the first TCP round trip each way. The one that
// stays up still holds the old WireGuard session and the old direct path:
//
//   - It answers the restarted node's handshake from an address that
//     node's ICE has not chosen yet, and the resent initiation is a replay
//     to WireGuard. The Bind matches the answer by receiver index.
//   - Its own packets use the old session. When the restarted node is the
//     side that waits before opening a handshake (see Node.addPeer), those
//     packets are its cue to open one at once.
//
// Before either, a first exchange waited up to 5 s for WireGuard's retry
// or 3 s for the waiting side's keepalive.
func TestRestartFirstExchange(t *testing.T) {
	byClock(t, func(t *testing.T) {
		// No CPU stalls in virtual time: every first exchange works at
		// once or on eventuallyEcho's second try, 100 ms later, far
		// below WireGuard's 5 s retry and the 3 s keepalive.
		restartFirstExchange(t, func(int) time.Duration { return 100 * time.Millisecond })
	}, func(t *testing.T) {
		// Restarted → peer: well under WireGuard's 5 s retry and the
		// waiting side's 3 s keepalive. Peer → restarted: the peer's
		// first SYN, sent on the stale session, is lost, so one SYN
		// retransmission (1 s) when idle; on a busy machine the
		// restarted node's ICE can be late and this still takes 3-6 s
		// in about one run in four (one WireGuard retry), so its bound
		// only catches worse. Under -race, four times each.
		restartFirstExchange(t, func(round int) time.Duration {
			if round%2 == 0 {
				return slow(8 * time.Second)
			}
			return slow(2500 * time.Millisecond)
		})
	})
}

// restartFirstExchange runs the four restart rounds; bound gives each
// round's limit on its first round trip, inclusive.
func restartFirstExchange(t *testing.T, bound func(round int) time.Duration) {
	w := newLabWorld(t)
	dir := t.TempDir()
	creds := func(name string) func(*node.Config) {
		return func(c *node.Config) { c.Credentials = node.OpenCredentials(filepath.Join(dir, name+".json")) }
	}
	hostA, hostB := w.site(t, "full-cone"), w.site(t, "full-cone")
	na, nb := &stockNetstack{}, &stockNetstack{}
	a := startNode(t, hostA, "alpha", na, creds("alpha"))
	b := startNode(t, hostB, "beta", nb, creds("beta"))
	serveEcho(t, na, 7)
	serveEcho(t, nb, 7)
	waitPath(t, a, node.PathDirect, slow(10*time.Second))
	waitPath(t, b, node.PathDirect, slow(10*time.Second))
	eventuallyEcho(t, na, b.Address().Addr(), 7, slow(10*time.Second), "before the restarts")

	// The lower key opens handshakes at once; the other waits.
	ida, idb := a.Identity(), b.Identity()
	ka, kb := ida.PublicKey(), idb.PublicKey()
	aLeads := bytes.Compare(ka[:], kb[:]) < 0
	for round := 1; round <= 4; round++ {
		// Rounds 1-2 restart the leading side, 3-4 the waiting one; odd
		// rounds time restarted → peer, even ones peer → restarted.
		restartA := (round <= 2) == aLeads
		what := map[bool]string{true: "leading", false: "waiting"}[round <= 2]
		var err error
		start := time.Now()
		if restartA {
			require.NoError(t, a.Close())
			na = &stockNetstack{}
			a = startNode(t, hostA, "alpha", na, creds("alpha"))
			serveEcho(t, na, 7)
		} else {
			require.NoError(t, b.Close())
			nb = &stockNetstack{}
			b = startNode(t, hostB, "beta", nb, creds("beta"))
			serveEcho(t, nb, 7)
		}
		from, to := na, b.Address().Addr() // restarted → peer, or peer → restarted
		if restartA == (round%2 == 0) {
			from, to = nb, a.Address().Addr()
		}
		dir := map[bool]string{true: "restarted → peer", false: "peer → restarted"}[round%2 == 1]
		eventuallyEcho(t, from, to, 7, slow(10*time.Second), dir)
		first := time.Since(start)
		t.Logf("round %d, %s side restarted, %s: first round trip after %v", round, what, dir, first)
		assert.LessOrEqual(t, first, bound(round), "round %d: %s side restarted, %s", round, what, dir)
		ctx, cancel := context.WithTimeout(t.Context(), slow(3*time.Second))
		err = tryEcho(ctx, na, b.Address().Addr(), 7)
		cancel()
		require.NoError(t, err, "round %d: alpha → beta afterwards", round)
	}
}
