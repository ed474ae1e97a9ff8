package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestCrossingInitiations: the leading side drops the peer's handshake
// initiation while its own is unanswered, and only then; the other side
// never does.
func TestCrossingInitiations(t *testing.T) {
	init := make([]byte, 148)
	init[0] = 1
	data := make([]byte, 64)
	data[0] = 4

	p := &Path{}
	assert.False(t, p.crossing(init), "nothing sent yet")
	p.hsInit, p.hsSent = []byte{1}, time.Now()
	assert.False(t, p.crossing(init), "the side that does not lead answers every initiation")

	p.SetLeads(true)
	assert.True(t, p.crossing(init), "ours is on its way: the peer's crosses it")
	assert.False(t, p.crossing(data), "only initiations")
	assert.False(t, p.crossing(init[:147]), "only whole initiations")

	p.hsResponse = true
	assert.False(t, p.crossing(init), "ours was answered: a new one from the peer is a rekey")

	p.hsResponse, p.hsSent = false, time.Now().Add(-glareWindow)
	assert.False(t, p.crossing(init), "ours has been unanswered too long to hold the peer's back")
}
