package relay

import (
	"fmt"
	"sync"

	"github.com/latticelab/lattice/key"
)

// QUIC datagrams are too small to carry a 32-byte key with a full-size
// packet (quic-go caps a QUIC packet at 1452 bytes, so a datagram payload at
// about 1415), so each end of a QUIC connection names the keys it sends to
// by a 4-byte id instead. The sender assigns the id and announces it with a
// BIND frame on the control stream; until the receiver's BIND_ACK arrives
// the sender keeps sending that key's packets as SEND/RECV frames on the
// stream, so no packet is lost to a datagram overtaking its BIND. Ids are
// never reused or rebound within a connection, so a receiver's id→key
// lookup can be cached forever.
const (
	// maxDatagramPeers bounds the ids per connection and direction; keys
	// beyond it travel on the stream. It also bounds the memory a peer can
	// make us spend on its BIND frames.
	maxDatagramPeers = 1024
	// rebindEvery re-sends a BIND whose ACK has not come after this many
	// packets, in case the receiver dropped it (a full control queue).
	rebindEvery = 64
)

// outIDs are the ids this end assigned to the keys it sends to.
type outIDs struct {
	// acked maps a key to the uint32 id of every acknowledged binding. It
	// only grows, so senders on any goroutine read it without locking.
	acked sync.Map

	mu    sync.Mutex // guards the following
	byKey map[key.Public]*outID
	byID  map[uint32]*outID
	next  uint32
}

// ackedID returns key's id if the receiver acknowledged it.
func (o *outIDs) ackedID(k key.Public) (uint32, bool) {
	v, ok := o.acked.Load(k)
	if !ok {
		return 0, false
	}
	return v.(uint32), true
}

type outID struct {
	id      uint32
	key     key.Public
	acked   bool
	pending int // packets sent on the stream since the last BIND
}

// lookup returns key's id and whether the receiver acknowledged it. id 0
// means the key has no id (the table is full): use the stream. bind is
// true when the caller must (re)send a BIND frame before the packet.
func (o *outIDs) lookup(k key.Public) (id uint32, acked, bind bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.byKey[k]
	if e == nil {
		if len(o.byKey) >= maxDatagramPeers {
			return 0, false, false
		}
		if o.byKey == nil {
			o.byKey = make(map[key.Public]*outID)
			o.byID = make(map[uint32]*outID)
		}
		o.next++
		e = &outID{id: o.next, key: k}
		o.byKey[k] = e
		o.byID[e.id] = e
		return e.id, false, true
	}
	if e.acked {
		return e.id, true, false
	}
	e.pending++
	return e.id, false, e.pending%rebindEvery == 0
}

// ack records the receiver's BIND_ACK. An ack for an id this end never
// assigned is a protocol violation.
func (o *outIDs) ack(id uint32) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.byID[id]
	if e == nil {
		return fmt.Errorf("%w: BIND_ACK for unassigned peer id %d", ErrProtocol, id)
	}
	if !e.acked {
		e.acked = true
		o.acked.Store(e.key, id)
	}
	return nil
}

// inIDs are the ids the other end assigned.
type inIDs struct {
	mu   sync.RWMutex // guards the following
	byID map[uint32]key.Public
}

// bind records a BIND. It returns ack=false when the table is full (the
// sender keeps using the stream) and an ErrProtocol error when id is
// already bound to another key. A repeated BIND for the same key is
// acknowledged again.
func (in *inIDs) bind(id uint32, k key.Public) (ack bool, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if old, ok := in.byID[id]; ok {
		if old != k {
			return false, fmt.Errorf("%w: BIND rebinds peer id %d", ErrProtocol, id)
		}
		return true, nil
	}
	if len(in.byID) >= maxDatagramPeers {
		return false, nil
	}
	if in.byID == nil {
		in.byID = make(map[uint32]key.Public)
	}
	in.byID[id] = k
	return true, nil
}

func (in *inIDs) lookup(id uint32) (key.Public, bool) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	k, ok := in.byID[id]
	return k, ok
}
