package runner

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/latticelab/lattice/node"
)

// TestWhyNotWording: a wait_path for direct that ends relayed says why in
// the node's words (issue 22.6), never the ICE library's error string.
func TestWhyNotWording(t *testing.T) {
	st := node.PeerStatus{Path: node.PathRelay, ICE: node.ICEReport{Err: "connecting canceled by caller"},
		Why: "UDP to the peer looks blocked: no STUN answer"}
	got := whyNot(st, "direct")
	assert.Contains(t, got, "UDP to the peer looks blocked: no STUN answer")
	assert.NotContains(t, got, "canceled by caller")
	assert.Equal(t, " (ICE has not given up yet)", whyNot(node.PeerStatus{Path: node.PathRelay}, "relay"))
}

// TestTimeToDirectCountsFromUp: time_to_direct is the pair's upgrade after
// both nodes were up, as the step says, not the later node's bring-up
// too. CI once failed quickstart's 2 s bound when, under load, the tablet
// took 2.15 s to come up and went direct 0.79 s after that.
func TestTimeToDirectCountsFromUp(t *testing.T) {
	began := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	up := began.Add(2150 * time.Millisecond)
	history := []node.PathEvent{
		{Time: began.Add(-time.Minute), To: node.PathDirect}, // an earlier incarnation's
		{Time: began.Add(100 * time.Millisecond), To: node.PathRelay},
		{Time: up.Add(790 * time.Millisecond), To: node.PathDirect},
		{Time: up.Add(5 * time.Second), To: node.PathDirect},
	}
	d, ok := timeToDirect(history, began, up)
	assert.True(t, ok)
	assert.Equal(t, 790*time.Millisecond, d)

	// Direct before the lab counted the node up (its overlay services
	// start after it) is no wait at all.
	d, ok = timeToDirect([]node.PathEvent{{Time: up.Add(-time.Millisecond), To: node.PathDirect}}, began, up)
	assert.True(t, ok)
	assert.Zero(t, d)

	_, ok = timeToDirect(history[:2], began, up)
	assert.False(t, ok, "no switch to direct since both started")
}
