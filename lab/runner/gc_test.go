package runner

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/latticelab/lattice/lab/topology"
)

// gcPercent reads the collector's growth target without changing it.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestHugeLabHoldsGC(t *testing.T) {
	t.Setenv("GOGC", "")
	defer debug.SetGCPercent(debug.SetGCPercent(100))

	release1, held := holdGC()
	assert.True(t, held)
	assert.Equal(t, hugeLabGCPercent, gcPercent(), "while a huge lab is up")
	release2, held := holdGC()
	assert.True(t, held)
	release1()
	release1() // idempotent: must not release the second hold
	assert.Equal(t, hugeLabGCPercent, gcPercent(), "while a second huge lab is still up")
	release2()
	assert.Equal(t, 100, gcPercent(), "put back once the last one closes")
}

func TestHugeLabLeavesLowerGC(t *testing.T) {
	t.Setenv("GOGC", "")
	defer debug.SetGCPercent(debug.SetGCPercent(20))
	release, held := holdGC()
	defer release()
	assert.False(t, held)
	assert.Equal(t, 20, gcPercent(), "a lower target set by the process stays")
}

func TestHugeLabRespectsGOGC(t *testing.T) {
	t.Setenv("GOGC", "200")
	defer debug.SetGCPercent(debug.SetGCPercent(200))
	release, held := holdGC()
	defer release()
	assert.False(t, held)
	assert.Equal(t, 200, gcPercent(), "the user's GOGC wins")
}

// TestLabSizePolicy: a lab's WireGuard batch and the collector hold
// follow its node count; scale.yaml's 100 nodes are a large lab (every
// pair pinged, they peaked at 1.5–1.7 GiB with batch 16 at GOGC=100).
func TestLabSizePolicy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes int
		batch int
		hold  bool
	}{
		{name: "small", nodes: 99, batch: labBatch, hold: false},
		{name: "scale.yaml", nodes: 100, batch: labLargeBatch, hold: true},
		{name: "large", nodes: 500, batch: labLargeBatch, hold: true},
		{name: "huge", nodes: 501, batch: 1, hold: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Lab{plan: &topology.Plan{Nodes: make([]topology.PlanNode, tc.nodes)}}
			assert.Equal(t, tc.batch, l.nodeBatch(), "batch")
			assert.Equal(t, tc.hold, l.holdsGC(), "collector hold")
		})
	}
}
