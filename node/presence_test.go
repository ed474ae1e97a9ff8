package node_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/link"
	"github.com/latticelab/lattice/node"
)

// peerState is n's status of its only peer, or false if it has none.
func peerState(n *node.Node) (node.PeerStatus, bool) {
	st := n.Status()
	if len(st) != 1 {
		return node.PeerStatus{}, false
	}
	return st[0], true
}

// waitOffline waits until n shows its peer offline and returns how long
// that took.
func waitOffline(t *testing.T, n *node.Node, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	require.Eventually(t, func() bool {
		st, ok := peerState(n)
		return ok && !st.Online && st.Path == node.PathOffline
	}, within, 5*time.Millisecond, "the peer was not shown offline within %v: %+v", within, n.Status())
	return time.Since(start)
}

// requireRefusedAtOnce: a TCP connect to the peer fails, fast, with an
// error from the overlay stack rather than a timeout.
func requireRefusedAtOnce(t *testing.T, from *stockNetstack, to *node.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	start := time.Now()
	err := tryEcho(ctx, from, to.Address().Addr(), 7)
	require.Error(t, err, "a connection to an offline peer")
	assert.Less(t, time.Since(start), time.Second, "the connection hung: %v", err)
	assert.False(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	assert.ErrorContains(t, err, "no route to host")
}

// TestStoppedPeerOffline: a node that stops cleanly is offline to its
// peers within a second, with connections to it refused at once; it
// comes back with the same identity and is reachable again.
func TestStoppedPeerOffline(t *testing.T) {
	w := newLabWorld(t)
	credPath := filepath.Join(t.TempDir(), "beta.json")
	withCreds := func(c *node.Config) { c.Credentials = node.OpenCredentials(credPath) }
	na, nb := &stockNetstack{}, &stockNetstack{}
	a := startNode(t, w.site(t, "full-cone"), "alpha", na)
	hostB := w.site(t, "full-cone")
	b := startNode(t, hostB, "beta", nb, withCreds)
	serveEcho(t, nb, 7)
	eventuallyEcho(t, na, b.Address().Addr(), 7, slow(10*time.Second), "before the stop")
	assert.Equal(t, control.DefaultPresenceTTL, a.PresenceTTL())

	start := time.Now()
	require.NoError(t, b.Close())
	waitOffline(t, a, time.Second)
	t.Logf("offline %v after the stop began", time.Since(start))
	assert.Less(t, time.Since(start), time.Second)
	requireRefusedAtOnce(t, na, b)
	st, _ := peerState(a)
	assert.Equal(t, b.Address(), st.Peer.Address, "an offline peer keeps its address")
	before := st.RxDirect + st.RxRelay
	assert.NotZero(t, before, "an offline peer keeps the byte counters of its last session")

	// Back, same identity: online and reachable again.
	nb2 := &stockNetstack{}
	b2 := startNode(t, hostB, "beta", nb2, withCreds)
	serveEcho(t, nb2, 7)
	require.Eventually(t, func() bool {
		st, ok := peerState(a)
		return ok && st.Online && st.Path != node.PathOffline
	}, slow(5*time.Second), 10*time.Millisecond, "beta never came back online: %+v", a.Status())
	eventuallyEcho(t, na, b2.Address().Addr(), 7, slow(10*time.Second), "after the comeback")
	st, _ = peerState(a)
	assert.Greater(t, st.RxDirect+st.RxRelay, before, "counters carry over the offline spell: totals since start")
}

// TestUncleanStopOfflineAfterTTL: a node that vanishes without a word
// (here its network is cut) is offline to its peers once the liveness
// timeout passes, not before; connections to it then fail at once, and it
// is online again when its network returns.
func TestUncleanStopOfflineAfterTTL(t *testing.T) {
	const ttl = 900 * time.Millisecond
	w := newLabWorld(t, func(c *control.Config) { c.PresenceTTL = ttl })
	na, nb := &stockNetstack{}, &stockNetstack{}
	a := startNode(t, w.site(t, "full-cone"), "alpha", na)
	hostB := w.site(t, "full-cone")
	b := startNode(t, hostB, "beta", nb)
	serveEcho(t, nb, 7)
	eventuallyEcho(t, na, b.Address().Addr(), 7, slow(10*time.Second), "before the cut")
	assert.Equal(t, ttl, a.PresenceTTL())

	ifc := hostB.Interface("eth0")
	require.NotNil(t, ifc)
	setDown := func(down bool) {
		for _, d := range []fabric.Direction{fabric.Egress, fabric.Ingress} {
			require.NoError(t, ifc.SetImpairments(d, link.Impairments{Down: down}))
		}
	}
	setDown(true)
	took := waitOffline(t, a, ttl+slow(2*time.Second))
	t.Logf("offline after %v (TTL %v)", took, ttl)
	// The last heartbeat came at most ttl/3 before the cut.
	assert.GreaterOrEqual(t, took, ttl*2/3, "offline before the liveness timeout")
	requireRefusedAtOnce(t, na, b)

	setDown(false)
	require.Eventually(t, func() bool {
		st, ok := peerState(a)
		return ok && st.Online
	}, slow(10*time.Second), 10*time.Millisecond, "beta never came back online: %+v", a.Status())
	eventuallyEcho(t, na, b.Address().Addr(), 7, slow(10*time.Second), "after the network came back")
}

// TestRecordLostWhileRunning: the registry loses a running node's record
// while its session stays up (emptied behind control's back); the node's
// next heartbeat is answered "not found", and it registers again, with
// the same address, so a node that joins afterwards hears of it and
// reaches it.
func TestRecordLostWhileRunning(t *testing.T) {
	const ttl = 900 * time.Millisecond
	w := newLabWorld(t, func(c *control.Config) { c.PresenceTTL = ttl })
	nb := &stockNetstack{}
	b := startNode(t, w.site(t, "full-cone"), "beta", nb)
	serveEcho(t, nb, 7)
	id := b.Identity()
	before, err := w.ctrl.Store().Get(t.Context(), id.NodeID)
	require.NoError(t, err)

	time.Sleep(ttl / 2) // past its first heartbeat: the record goes while the node runs
	require.NoError(t, w.ctrl.Store().Delete(t.Context(), id.NodeID))
	var again *control.Node
	require.Eventually(t, func() bool {
		again, err = w.ctrl.Store().Get(t.Context(), id.NodeID)
		return err == nil
	}, ttl+slow(5*time.Second), 20*time.Millisecond, "beta never registered again")
	assert.Greater(t, again.Epoch, before.Epoch, "a new registration")
	assert.Equal(t, before.Address, again.Address, "same key, same address")

	nc := &stockNetstack{}
	startNode(t, w.site(t, "full-cone"), "gamma", nc)
	eventuallyEcho(t, nc, b.Address().Addr(), 7, slow(10*time.Second), "to beta after it registered again")
}
