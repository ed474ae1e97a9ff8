package node_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/link"
	"github.com/latticelab/lattice/node"
)

// TestShortDeadAfterStaysDirect: an idle direct path with a short
// DeadAfter (the lab's topologies use 1.5-2 s for quick failover) stays
// direct. ICE consent must come several times within DeadAfter; with a
// fixed 1 s keepalive, DeadAfter 2 s left one keepalive's slack (the path
// dropped to the relay whenever a response came a moment late) and 1.5 s
// left none.
//
// Both clocks run. In virtual time no response is ever late for want of
// CPU, so the failure above (a consent response a moment late on a busy
// machine) is the wall-clock subtest's to catch; the virtual one checks
// exactly that consent keeps an idle path up for ten minutes.
func TestShortDeadAfterStaysDirect(t *testing.T) {
	t.Run("virtual", func(t *testing.T) { inVirtualTime(t, shortDeadAfterVirtual) })
	t.Run("realtime", shortDeadAfterRealTime)
}

// shortDeadAfterVirtual: with DeadAfter 1.5 s, consent every 375 ms and a
// 200 ms round trip with ±50 ms of seeded jitter each way, the path stays
// direct through ten minutes of idle virtual time: exactly two path
// changes (relay, then direct), none after. Without consent it drops to
// the relay within seconds.
func shortDeadAfterVirtual(t *testing.T) {
	w := newLabWorld(t)
	short := func(c *node.Config) { c.ICE.DeadAfter = 1500 * time.Millisecond }
	ha, hb := w.site(t, "full-cone"), w.site(t, "full-cone")
	for _, h := range []*fabric.Host{ha, hb} {
		require.NoError(t, h.FabricInterfaces()[0].SetImpairments(fabric.Egress, link.Impairments{Latency: 100 * time.Millisecond, Jitter: 50 * time.Millisecond}))
	}
	a := startNode(t, ha, "alpha", &stockNetstack{}, short)
	b := startNode(t, hb, "beta", &stockNetstack{}, short)
	waitPath(t, a, node.PathDirect, 10*time.Second)
	waitPath(t, b, node.PathDirect, 10*time.Second)
	time.Sleep(10 * time.Minute)
	for _, n := range []*node.Node{a, b} {
		st := n.Status()[0]
		assert.Equal(t, node.PathDirect, st.Path, "%s → %s: %+v", n.Identity().Name, st.Peer.Name, st.History)
		assert.Len(t, st.History, 2, "%s → %s switched paths: %+v", n.Identity().Name, st.Peer.Name, st.History)
	}
}

// shortDeadAfterRealTime: the same on the wall clock, for 4 s.
func shortDeadAfterRealTime(t *testing.T) {
	w := newLabWorld(t)
	// Under -race on a busy machine pion's timers can stall for over a
	// second, so there the DeadAfter is four times longer; the suite runs
	// this test again without -race.
	short := func(c *node.Config) { c.ICE.DeadAfter = slow(1500 * time.Millisecond) }
	a := startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{}, short)
	b := startNode(t, w.site(t, "full-cone"), "beta", &stockNetstack{}, short)
	waitPath(t, a, node.PathDirect, slow(10*time.Second))
	waitPath(t, b, node.PathDirect, slow(10*time.Second))
	time.Sleep(4 * time.Second)
	for _, n := range []*node.Node{a, b} {
		st := n.Status()[0]
		assert.Equal(t, node.PathDirect, st.Path, "%s → %s: %+v", n.Identity().Name, st.Peer.Name, st.History)
		assert.Len(t, st.History, 2, "%s → %s switched paths: %+v", n.Identity().Name, st.Peer.Name, st.History)
	}
}
