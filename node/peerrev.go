package node

import (
	"time"

	"github.com/latticelab/lattice/control/controlapi"
)

// Control instances that share a registry (a NATS KV bucket) publish
// peer events and answer peer lists each on their own, so what a node
// receives from two of them comes in no common order: a node's PeerAdded
// from the instance it registered on can arrive after its PeerRemoved
// from the one it left through, or after a list taken later. The
// registry revision each event and list carries (controlapi.Peer.Rev,
// PeerPage.Rev) orders them: every write of a record, a registration, a
// take-back of a lost one (older epoch, later revision), a removal, has
// a revision above the last. revBook keeps what the node has applied of
// them. Revisions count within one registry (controlapi.Peer.Reg): one
// made again counts from 1 again, and names itself with a larger Reg, so
// the book starts over with it and ignores what still comes from the old
// one. Revisions of 0 (a control of one instance, or one from before
// revisions) are never judged: epochs then order a peer's registrations
// (earlierLife) and events are applied as they come.

// goneKeep is how long a removed peer's revision is kept to judge late
// events about it by. Events that late are seconds late at most; a peer
// list taken since covers the rest (revBook.listRev).
const goneKeep = time.Minute

// revBook is the registry revisions a node has applied. Guarded by the
// node's peerMu.
type revBook struct {
	reg     uint64           // the registry they count in (controlapi.Peer.Reg); 0: none named yet
	live    map[string]revAt // a peer's record as last applied (never at revision 0: see applied)
	gone    map[string]revAt // a removed peer's record, as removed
	listRev uint64           // the last peer list held every change up to this
}

// revAt is a record's revision, the registration (epoch) it is of, and
// (gone) when it was removed.
type revAt struct {
	rev, epoch uint64
	at         time.Time
}

// revKind is what an event or list entry says of a peer.
type revKind int

const (
	revRecord   revKind = iota // its record (added, updated, listed)
	revPresence                // online or offline: its record as the sender had it
	revRemoved                 // its record is removed
)

// registry reports whether reg, the registry an event or list counts
// its revisions in, is one the book has left behind (an older one: its
// news is stale). A later one starts the book over: its revisions count
// from 1 again. 0 names none and is taken for the book's own.
func (b *revBook) registry(reg uint64) (old bool) {
	switch {
	case reg == 0 || reg == b.reg:
		return false
	case reg < b.reg:
		return true
	}
	if b.reg != 0 {
		*b = revBook{}
	}
	b.reg = reg
	return false
}

// judges reports whether the book can order info by revision: info has
// one and the book holds one of the peer (applied, or removed). Where it
// can, revisions decide alone; where not, epochs order the peer's lives
// (earlierLife).
func (b *revBook) judges(id string, rev uint64) bool {
	_, live := b.live[id]
	_, gone := b.gone[id]
	return rev != 0 && (live || gone)
}

// above reports whether rev is above every revision the book holds of
// id (applied, or removed), and it holds one: a later write of the
// peer's record than any the node applied.
func (b *revBook) above(id string, rev uint64) bool {
	if !b.judges(id, rev) {
		return false
	}
	r, ok := b.live[id]
	if ok && rev <= r.rev {
		return false
	}
	g, ok := b.gone[id]
	return !ok || rev > g.rev
}

// stale reports whether info, applied as kind, would take the peer back
// to a registry revision older than what the node applied: a record (or
// presence) of a peer removed since or absent from a later list, a
// record older than the one held, or the removal of an earlier one. A
// presence event carries the peer's record as its sender had it: an
// older copy of the record held is still news of the same registration
// (the instance that saw the peer go offline may lag behind), but not of
// another one (an earlier life, or one control took back).
func (b *revBook) stale(info controlapi.Peer, kind revKind) (bool, uint64) {
	if info.Rev == 0 {
		return false, 0
	}
	if g, ok := b.gone[info.NodeID]; ok && kind != revRemoved && info.Rev <= g.rev {
		return true, g.rev
	}
	known, ok := b.live[info.NodeID]
	switch {
	case !ok:
		// Absent from the last list, or removed since: a record it held.
		return kind != revRemoved && info.Rev <= b.listRev, b.listRev
	case kind == revPresence:
		return info.Rev < known.rev && info.Epoch != known.epoch, known.rev
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
		b.gone[id] = revAt{rev: max(info.Rev, g.rev), epoch: info.Epoch, at: now}
		return
	}
	delete(b.gone, id)
	if info.Rev == 0 {
		return // nothing to judge by: a registry of one instance
	}
	if b.live == nil {
		b.live = map[string]revAt{}
	}
	if r, ok := b.live[id]; !ok || info.Rev >= r.rev {
		// (An older copy, in a presence event, leaves the record held.)
		b.live[id] = revAt{rev: info.Rev, epoch: info.Epoch}
	}
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
