package scenario

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/latticelab/lattice/node"
)

// TestPathDetailWhy: a relayed pair's step output is the node's own
// words for why (issue 22.6), never pion's error string, even when ICE
// left one behind.
func TestPathDetailWhy(t *testing.T) {
	const pion = "connecting canceled by caller"
	st := node.PeerStatus{Path: node.PathRelay, ICE: node.ICEReport{Err: pion},
		Why:     "attempt timed out after 3s, next in 8s",
		History: []node.PathEvent{{Time: time.Unix(1, 0), To: node.PathRelay, Reason: "peer registered"}}}
	got := PathDetail(st)
	assert.Equal(t, "relay (attempt timed out after 3s, next in 8s)", got)
	assert.NotContains(t, got, pion)

	st.Why = ""
	assert.Equal(t, "relay (peer registered)", PathDetail(st), "without a why, the last switch's reason")
	st.History = nil
	assert.Equal(t, "relay", PathDetail(st))
	assert.Equal(t, "direct to 203.0.113.1:51820", PathDetail(node.PeerStatus{Path: node.PathDirect, Endpoint: "203.0.113.1:51820"}))
}
