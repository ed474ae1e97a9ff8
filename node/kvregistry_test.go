package node_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/node"
)

// TestMeshOnKVRegistry runs nodes against control with its registry in a
// JetStream bucket, where peer events and lists carry registry revisions
// the node orders them by: peers join, restart (a new record) and stop
// (offline), and every node's peer set follows.
func TestMeshOnKVRegistry(t *testing.T) {
	w := newLabWorld(t, func(c *control.Config) {
		c.Store, c.KVBucket = nil, "lattice"
		c.EmbeddedNATS.StoreDir = filepath.Join(t.TempDir(), "js")
	})
	dir := t.TempDir()
	creds := func(name string) func(*node.Config) {
		return func(c *node.Config) { c.Credentials = node.OpenCredentials(filepath.Join(dir, name+".json")) }
	}
	na, nb := &stockNetstack{}, &stockNetstack{}
	a := startNode(t, w.site(t, "full-cone"), "alpha", na, creds("alpha"))
	hostB := w.site(t, "full-cone")
	b := startNode(t, hostB, "beta", nb, creds("beta"))
	c := startNode(t, w.site(t, "full-cone"), "gamma", &stockNetstack{}, creds("gamma"))
	serveEcho(t, nb, 7)
	online := func(n *node.Node, want ...string) func() bool {
		return func() bool {
			got := map[string]bool{}
			for _, p := range n.Peers() {
				got[p.Name] = !p.Offline
			}
			for _, name := range want {
				if !got[name] {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, online(a, "beta", "gamma"), slow(10*time.Second), 10*time.Millisecond, "alpha's peers")
	require.Eventually(t, online(c, "alpha", "beta"), slow(10*time.Second), 10*time.Millisecond, "gamma's peers")
	for _, p := range a.Peers() {
		assert.Positive(t, p.Rev, "%s's entry carries its registry revision", p.Name)
	}
	eventuallyEcho(t, na, b.Address().Addr(), 7, slow(10*time.Second), "alpha → beta")

	// beta restarts with its identity: a new record, at a later revision.
	var before uint64
	for _, p := range a.Peers() {
		if p.Name == "beta" {
			before = p.Rev
		}
	}
	require.NoError(t, b.Close())
	nb = &stockNetstack{}
	b = startNode(t, hostB, "beta", nb, creds("beta"))
	serveEcho(t, nb, 7)
	require.Eventually(t, func() bool {
		for _, p := range a.Peers() {
			if p.Name == "beta" {
				return !p.Offline && p.Rev > before
			}
		}
		return false
	}, slow(10*time.Second), 10*time.Millisecond, "alpha has beta's new record")
	eventuallyEcho(t, na, b.Address().Addr(), 7, slow(10*time.Second), "alpha → restarted beta")

	// gamma stops: offline at alpha and beta, still their peer.
	require.NoError(t, c.Close())
	offline := func(n *node.Node) func() bool {
		return func() bool {
			for _, p := range n.Peers() {
				if p.Name == "gamma" {
					return p.Offline
				}
			}
			return false
		}
	}
	require.Eventually(t, offline(a), slow(10*time.Second), 10*time.Millisecond, "alpha sees gamma offline")
	require.Eventually(t, offline(b), slow(10*time.Second), 10*time.Millisecond, "beta sees gamma offline")
	assert.Len(t, a.Peers(), 2)
}
