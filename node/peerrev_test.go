package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/latticelab/lattice/control/controlapi"
)

// TestRevBookOrder: within one registry, revisions order a peer's records
// whatever their epochs (a take-back writes an earlier registration's
// record at a later revision); a presence event's older copy of the
// record held is news only of the same registration; a registry made
// again (a larger Reg) starts the book over, and what comes from the
// old one is stale; a list entry overrides a recent event only as a
// later write (above). Removed peers' revisions are kept a while, then
// dropped.
func TestRevBookOrder(t *testing.T) {
	var b revBook
	now := time.Unix(1000, 0)
	p := func(id string, rev, epoch uint64) controlapi.Peer {
		return controlapi.Peer{NodeID: id, Rev: rev, Epoch: epoch}
	}
	assert.False(t, b.registry(1))
	b.applied(p("x", 500, 10), revRecord, now)
	b.listed(600)
	assert.True(t, b.judges("x", 400))
	assert.False(t, b.judges("x", 0), "no revision: epochs judge")
	assert.False(t, b.judges("nobody", 400), "a peer the book holds nothing of: epochs judge")
	stale, _ := b.stale(p("x", 400, 10), revRecord)
	assert.True(t, stale, "an older record of the same registration")
	stale, _ = b.stale(p("x", 450, 20), revRecord)
	assert.True(t, stale, "a later registration's record, at an older revision, is older")
	stale, _ = b.stale(p("x", 501, 5), revRecord)
	assert.False(t, stale, "an earlier registration's record at a later revision (a take-back) is newer")

	stale, _ = b.stale(p("x", 400, 10), revPresence)
	assert.False(t, stale, "presence of the same registration, from an instance behind: news")
	stale, _ = b.stale(p("x", 400, 20), revPresence)
	assert.True(t, stale, "presence with a record of another registration, older than the one held")
	b.applied(p("x", 400, 10), revPresence, now)
	stale, _ = b.stale(p("x", 450, 10), revRecord)
	assert.True(t, stale, "a presence event's older copy lowered the record held")

	b.applied(p("y", 550, 10), revRemoved, now)
	assert.True(t, b.judges("y", 5))
	stale, _ = b.stale(p("y", 550, 10), revRecord)
	assert.True(t, stale, "the removed record itself")
	stale, _ = b.stale(p("y", 700, 30), revRecord)
	assert.False(t, stale, "the removed peer's next registration")

	stale, _ = b.stale(p("z", 7, 40), revRecord)
	assert.True(t, stale, "a low revision of a peer the last list left out reads as old")
	assert.True(t, b.registry(0) == false && b.reg == 1, "Reg 0 is the book's own")
	assert.False(t, b.registry(2), "a registry made again is no news to skip")
	assert.Equal(t, uint64(2), b.reg)
	stale, _ = b.stale(p("z", 7, 40), revRecord)
	assert.False(t, stale, "the new registry's revisions stand alone")
	assert.Empty(t, b.live, "the old registry's revisions forgotten")
	assert.True(t, b.registry(1), "news from the registry left behind")

	b.applied(p("z", 7, 40), revRecord, now)
	assert.True(t, b.above("z", 8), "a later write of the record")
	assert.False(t, b.above("z", 7), "the record applied (a presence event leaves it so)")
	assert.False(t, b.above("nobody", 8), "a peer the book holds nothing of")
	b.applied(p("z", 9, 40), revRemoved, now)
	assert.False(t, b.above("z", 9), "the record removed")
	assert.True(t, b.above("z", 10), "the removed peer's next record")

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
