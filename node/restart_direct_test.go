package node_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/node"
)

// TestRestartFirstExchange restarts one node of a direct pair with the
// same identity, three times, and times the first TCP round trip from it.
// The peer still holds the old WireGuard session and the old direct path,
// so it answers the restarted node's handshake from an address that
// node's ICE has not chosen yet; the resent initiation is a replay to
// WireGuard. Before the Bind matched such answers by receiver index, the
// handshake waited for WireGuard's 5 s retry in most restarts.
func TestRestartFirstExchange(t *testing.T) {
	w := newLabWorld(t)
	credPath := filepath.Join(t.TempDir(), "alpha.json")
	withCreds := func(c *node.Config) { c.Credentials = node.OpenCredentials(credPath) }
	na, nb := &stockNetstack{}, &stockNetstack{}
	hostA := w.site(t, "full-cone")
	a := startNode(t, hostA, "alpha", na, withCreds)
	b := startNode(t, w.site(t, "full-cone"), "beta", nb)
	serveEcho(t, nb, 7)
	waitPath(t, a, node.PathDirect, slow(10*time.Second))
	waitPath(t, b, node.PathDirect, slow(10*time.Second))
	eventuallyEcho(t, na, b.Address().Addr(), 7, slow(10*time.Second), "before the restart")

	for round := 1; round <= 3; round++ {
		require.NoError(t, a.Close())
		na = &stockNetstack{}
		start := time.Now()
		a = startNode(t, hostA, "alpha", na, withCreds)
		serveEcho(t, na, 7)
		eventuallyEcho(t, na, b.Address().Addr(), 7, slow(10*time.Second), "restarted node to its peer")
		first := time.Since(start)
		t.Logf("restart %d: first round trip after %v", round, first)
		// WireGuard's own retry comes at 5 s; well under it even under -race.
		assert.Less(t, first, 2500*time.Millisecond, "restart %d: first round trip", round)

		ctx, cancel := context.WithTimeout(t.Context(), slow(3*time.Second))
		require.NoError(t, tryEcho(ctx, nb, a.Address().Addr(), 7), "restart %d: peer to the restarted node", round)
		cancel()
	}
}
