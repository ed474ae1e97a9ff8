package node

import (
	"time"

	"github.com/latticelab/lattice/control/controlapi"
)

// Control instances that share a registry (a NATS KV bucket) publish
// peer events and answer peer lists each on their own, so what a node
// receives from two of them comes in no common order: a node's PeerAdded
// from the instance it registered on can arrive after its PeerRemoved
// from the one it left through, or after a list taken later. Epochs
// order a node's registrations (earlierLife); within one, the registry
// revision each event and list carries (controlapi.Peer.Rev,
// PeerPage.Rev) orders the rest. revBook keeps what the node has applied
// of them. Revisions of 0 (a control of one instance, or one from before
// revisions) are never judged: events are then applied as they come.

// goneKeep is how long a removed peer's revision is kept to judge late
// events about it by. Events that late are seconds late at most; a peer
// list taken since covers the rest (revBook.listRev).
const goneKeep = time.Minute

// revBook is the registry revisions a node has applied. Guarded by the
// node's peerMu.
type revBook struct {
	live    map[string]revAt // a peer's record as last applied
	gone    map[string]revAt // a removed peer's record, as removed
	listRev uint64           // the last peer list held every change up to this
}

// revAt is a record's revision, the registration (epoch) it is of, and
// (gone) when it was removed.
type revAt struct {
	rev, epoch uint64
	at         time.Time
}

// newer reports whether info is of a later registration than r: its
// record is then newer whatever the revisions say (a registry started
// over numbers from 1 again; epochs, from the clock, keep growing).
func (r revAt) newer(info controlapi.Peer) bool {
	return info.Epoch != 0 && r.epoch != 0 && info.Epoch > r.epoch
}

// revKind is what an event or list entry says of a peer.
type revKind int

const (
	revRecord   revKind = iota // its record (added, updated, listed)
	revPresence                // online or offline: its record as the sender had it
	revRemoved                 // its record is removed
)

// stale reports whether info, applied as kind, would take the peer back
// to a registry revision older than what the node applied: a record
// (or presence) of a peer removed since or absent from a later list, a
// record older than the one held, or the removal of an earlier one;
// unless info is of a later registration. A presence event about a peer
// the node holds is never stale by revision: the instance that saw the
// peer go offline may have an older copy of its record, and its news is
// still news (earlierLife orders lives).
func (b *revBook) stale(info controlapi.Peer, kind revKind) (bool, uint64) {
	if info.Rev == 0 {
		return false, 0
	}
	if g, ok := b.gone[info.NodeID]; ok && kind != revRemoved {
		if g.newer(info) {
			return false, 0
		}
		if info.Rev <= g.rev {
			return true, g.rev
		}
	}
	known, ok := b.live[info.NodeID]
	switch {
	case !ok:
		// Absent from the last list, or removed since: a record it held.
		return kind != revRemoved && info.Rev <= b.listRev, b.listRev
	case known.rev == 0 || kind == revPresence || known.newer(info):
		return false, 0
	default:
		return info.Rev < known.rev, known.rev
	}
}

// applied records that info was applied as kind.
func (b *revBook) applied(info controlapi.Peer, kind revKind, now time.Time) {
	id := info.NodeID
	if kind == revRemoved {
		delete(b.live, id)
		if info.Rev == 0 {
			return
		}
		if b.gone == nil {
			b.gone = map[string]revAt{}
		}
		if len(b.gone) >= 64 {
			for k, g := range b.gone {
				if now.Sub(g.at) > goneKeep {
					delete(b.gone, k)
				}
			}
		}
		g := b.gone[id]
		b.gone[id] = revAt{rev: max(info.Rev, g.rev), epoch: max(info.Epoch, g.epoch), at: now}
		return
	}
	delete(b.gone, id)
	if info.Rev == 0 {
		return // nothing to judge by: a registry of one instance
	}
	if b.live == nil {
		b.live = map[string]revAt{}
	}
	r := b.live[id]
	if r.newer(info) {
		r = revAt{}
	}
	b.live[id] = revAt{rev: max(r.rev, info.Rev), epoch: max(r.epoch, info.Epoch)}
}

// known is the revision of id's record as applied; 0: none, or unknown.
func (b *revBook) known(id string) uint64 { return b.live[id].rev }

// listed records a peer list that held every change up to rev: what it
// does not hold was removed by then, so removals up to rev need no
// keeping.
func (b *revBook) listed(rev uint64) {
	if rev <= b.listRev {
		return
	}
	b.listRev = rev
	for k, g := range b.gone {
		if g.rev <= rev {
			delete(b.gone, k)
		}
	}
}

// below reports whether every live record the node holds a revision of
// is above rev (true if it holds none).
func (b *revBook) below(rev uint64) bool {
	for _, r := range b.live {
		if r.rev <= rev {
			return false
		}
	}
	return true
}

// reset forgets every revision: the node registered again after control
// refused its session, perhaps on a registry started over, whose
// revisions begin again from 1.
func (b *revBook) reset() { *b = revBook{} }
