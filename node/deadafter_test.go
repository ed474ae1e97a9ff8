package node_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/latticelab/lattice/node"
)

// TestShortDeadAfterStaysDirect: an idle direct path with a short
// DeadAfter (the lab's topologies use 1.5-2 s for quick failover) stays
// direct. ICE consent must come several times within DeadAfter; with a
// fixed 1 s keepalive, DeadAfter 2 s left one keepalive's slack (the path
// dropped to the relay whenever a response came a moment late) and 1.5 s
// left none.
func TestShortDeadAfterStaysDirect(t *testing.T) {
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
