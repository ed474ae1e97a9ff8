package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/latticelab/lattice/control/controlapi"
)

// TestRevBookLaterLifeAndStartOver: a record of a later registration
// (higher epoch) is news whatever its revision says, as after a registry
// that started over numbers revisions from 1 again; and a node that
// registers again (reset) forgets the old registry's revisions, so the
// new one's low revisions are not taken for old ones. Removed peers'
// revisions are kept a while, then dropped.
func TestRevBookLaterLifeAndStartOver(t *testing.T) {
	var b revBook
	now := time.Unix(1000, 0)
	p := func(id string, rev, epoch uint64) controlapi.Peer {
		return controlapi.Peer{NodeID: id, Rev: rev, Epoch: epoch}
	}
	b.applied(p("x", 500, 10), revRecord, now)
	b.listed(600)
	stale, _ := b.stale(p("x", 400, 10), revRecord)
	assert.True(t, stale, "an older record of the same registration")
	stale, _ = b.stale(p("x", 3, 20), revRecord)
	assert.False(t, stale, "a later registration's record, on a registry started over")
	b.applied(p("x", 3, 20), revRecord, now)
	stale, _ = b.stale(p("x", 4, 20), revRecord)
	assert.False(t, stale, "the later registration's revisions count from its own")

	b.applied(p("y", 550, 10), revRemoved, now)
	stale, _ = b.stale(p("y", 5, 30), revRecord)
	assert.False(t, stale, "a later registration of a removed peer")
	stale, _ = b.stale(p("y", 550, 10), revRecord)
	assert.True(t, stale, "the removed record itself")

	stale, _ = b.stale(p("z", 7, 40), revRecord)
	assert.True(t, stale, "before the reset, a low revision of a peer the list left out reads as old")
	b.reset()
	stale, _ = b.stale(p("z", 7, 40), revRecord)
	assert.False(t, stale, "after registering again, the new registry's revisions stand alone")

	// Removals are forgotten a minute on, once there are many.
	for i := range 64 {
		b.applied(p(string(rune('a'+i)), uint64(i+1), 1), revRemoved, now)
	}
	b.applied(p("late", 100, 1), revRemoved, now.Add(2*goneKeep))
	assert.Len(t, b.gone, 1, "removals older than goneKeep dropped")

	var none revBook
	none.applied(p("w", 0, 1), revRecord, now)
	assert.Empty(t, none.live, "a registry without revisions costs no entry")
}
