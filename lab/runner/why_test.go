package runner

import (
	"testing"

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
