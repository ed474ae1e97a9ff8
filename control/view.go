package control

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
)

// view is this instance's copy of the registry, in node ID order, for
// what must not read the whole store per request: the first page of a
// registration answer, peer list pages, and the recipients of peer
// events. The store stays the authority for claims (addresses, names)
// and credentials; the view follows it, from this instance's own writes
// at once and, for a store shared with other instances (a KV bucket),
// from its watch. So it may lag another instance's write by the watch's
// delay, as a peer event would. Each node's peer form is encoded once.
type view struct {
	mu     sync.Mutex // guards the following fields
	ids    []string   // sorted
	byID   map[string]*viewEntry
	legacy map[string]struct{} // nodes without SharedEvents: sent their own events
}

type viewEntry struct {
	node *Node     // its rev: the store revision, 0 when unknown (a local write)
	enc  [2][]byte // the encoded Peer, online [0] and offline [1], made on demand
}

func newView() *view {
	return &view{byID: map[string]*viewEntry{}, legacy: map[string]struct{}{}}
}

// put records n at store revision rev (n's own if higher). A revision
// below the one held is an old watch entry arriving after a newer local
// write and is ignored.
func (v *view) put(n *Node, rev uint64) {
	c := *n
	c.rev = max(c.rev, rev)
	v.mu.Lock()
	defer v.mu.Unlock()
	if e, ok := v.byID[n.ID]; ok {
		if rev != 0 && e.node.rev > rev {
			return
		}
		c.rev = max(c.rev, e.node.rev)
		e.node, e.enc = &c, [2][]byte{}
	} else {
		i, _ := slices.BinarySearch(v.ids, n.ID)
		v.ids = slices.Insert(v.ids, i, n.ID)
		v.byID[n.ID] = &viewEntry{node: &c}
	}
	if n.SharedEvents {
		delete(v.legacy, n.ID)
	} else {
		v.legacy[n.ID] = struct{}{}
	}
}

// removeAt forgets id, deleted at store revision rev (0: unknown). A
// revision below the one held is an old watch entry arriving after a
// newer local write (the node registered again) and is ignored.
func (v *view) removeAt(id string, rev uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.byID[id]
	if !ok || rev != 0 && e.node.rev > rev {
		return
	}
	delete(v.byID, id)
	delete(v.legacy, id)
	if i, ok := slices.BinarySearch(v.ids, id); ok {
		v.ids = slices.Delete(v.ids, i, i+1)
	}
}

// get returns a copy of id's record, nil if the view has none.
func (v *view) get(id string) *Node {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.byID[id]
	if !ok {
		return nil
	}
	c := *e.node
	return &c
}

// has reports whether the view holds id.
func (v *view) has(id string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.byID[id]
	return ok
}

// len is the number of nodes.
func (v *view) len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.ids)
}

// legacyIDs lists the nodes that need their own copy of each event.
func (v *view) legacyIDs() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]string, 0, len(v.legacy))
	for id := range v.legacy {
		out = append(out, id)
	}
	return out
}

// page encodes, as a JSON array, the peers after the ID after (all of
// them if empty), skipping self, that fit in budget bytes, and reports
// whether more follow; n is how many it holds. offline says whether a
// node is offline.
func (v *view) page(after, self string, budget int, offline func(id string) bool) (_ json.RawMessage, n int, more bool, err error) {
	return v.appendPage(make([]byte, 0, min(budget, 64<<10)), after, self, budget, offline)
}

// appendPage is page appending to dst; budget counts only what it
// appends. A dst with room for budget more bytes is never copied.
func (v *view) appendPage(dst []byte, after, self string, budget int, offline func(id string) bool) (_ []byte, n int, more bool, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	i, found := slices.BinarySearch(v.ids, after)
	if found {
		i++
	}
	buf := append(dst, '[')
	size := 2
	for ; i < len(v.ids); i++ {
		id := v.ids[i]
		if id == self {
			continue
		}
		b, err := v.byID[id].encoded(offline(id))
		if err != nil {
			return nil, 0, false, err
		}
		if size+len(b)+1 > budget {
			return append(buf, ']'), n, true, nil
		}
		n++
		if size > 2 {
			buf = append(buf, ',')
		}
		buf = append(buf, b...)
		size += len(b) + 1
	}
	return append(buf, ']'), n, false, nil
}

// encoded is the entry's Peer as JSON, cached.
func (e *viewEntry) encoded(offline bool) ([]byte, error) {
	k := 0
	if offline {
		k = 1
	}
	if e.enc[k] == nil {
		p := e.node.peer()
		p.Offline = offline
		b, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("encode peer %s: %w", e.node.ID, err)
		}
		e.enc[k] = b
	}
	return e.enc[k], nil
}
