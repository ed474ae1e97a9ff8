package relay

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"time"
)

// preauth bounds the connections that have not authenticated yet: at most
// max in all and perSource from one source (an IPv4 address, an IPv6 /64).
// A connection that would pass either bound evicts the oldest one it
// competes with (the oldest of its source, or the oldest of all) if that
// one has had minEvictAge to finish its handshake; otherwise the newcomer
// is refused. So connections that only sit there cannot lock a newcomer
// out, while a burst of real clients (a relay restart behind one NAT)
// finishes the handshakes it started instead of evicting them. Pure
// bookkeeping, on the clock the caller passes: the caller closes the
// victims.
type preauth struct {
	max, perSource int

	mu    sync.Mutex // guards the following
	all   list.List  // of *pending, oldest first
	bySrc map[netip.Addr]*list.List
}

// minEvictAge is how long a pending connection is safe from eviction: a
// handshake round trip on all but the longest paths.
const minEvictAge = 100 * time.Millisecond

// pending is one connection in the table.
type pending struct {
	src     netip.Addr
	at      time.Time // admitted
	evict   func()    // closes the connection
	inAll   *list.Element
	inSrc   *list.Element
	removed bool // evicted, or left by done
}

// eviction is a connection admit pushed out to make room.
type eviction struct {
	victim    *pending
	perSource bool // evicted by its source's bound, not the table's
}

func newPreauth(max, perSource int) *preauth {
	return &preauth{max: max, perSource: perSource, bySrc: make(map[netip.Addr]*list.List)}
}

// sourceOf is the address a connection is counted against: IPv4 addresses
// stand alone, IPv6 ones by /64, the smallest prefix a site is given.
func sourceOf(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// sourceOfNet is sourceOf for a net.Addr; unknown kinds share the zero
// address (a lab or test network that names addresses otherwise).
func sourceOfNet(a net.Addr) netip.Addr {
	var ap netip.AddrPort
	switch v := a.(type) {
	case *net.TCPAddr:
		ap = v.AddrPort()
	case *net.UDPAddr:
		ap = v.AddrPort()
	default:
		ap, _ = netip.ParseAddrPort(a.String())
	}
	return sourceOf(ap.Addr())
}

// admit enters a connection from src at now, closed by evict when it is
// pushed out later. It returns the entry and the connections evicted to
// make room (already out of the table; the caller closes them, outside
// any lock). A nil entry means the newcomer is refused (perSource says by
// which bound) and the caller closes it.
func (p *preauth) admit(src netip.Addr, now time.Time, evict func()) (e *pending, out []eviction, perSource bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	srcFull := p.bySrc[src] != nil && p.bySrc[src].Len() >= p.perSource
	// Check both bounds before evicting anyone, so a refused newcomer
	// costs nobody their place.
	if srcFull && !p.evictable(p.bySrc[src].Front(), now) {
		return nil, nil, true
	}
	allFull := p.all.Len() >= p.max
	if allFull && !srcFull && !p.evictable(p.all.Front(), now) {
		return nil, nil, false
	}
	if srcFull {
		v := p.bySrc[src].Front().Value.(*pending)
		p.removeLocked(v)
		out = append(out, eviction{victim: v, perSource: true})
	} else if allFull {
		v := p.all.Front().Value.(*pending)
		p.removeLocked(v)
		out = append(out, eviction{victim: v})
	}
	e = &pending{src: src, at: now, evict: evict}
	e.inAll = p.all.PushBack(e)
	sl := p.bySrc[src]
	if sl == nil {
		sl = list.New()
		p.bySrc[src] = sl
	}
	e.inSrc = sl.PushBack(e)
	return e, out, false
}

func (p *preauth) evictable(el *list.Element, now time.Time) bool {
	return now.Sub(el.Value.(*pending).at) >= minEvictAge
}

// done takes e out of the table because its connection authenticated or
// failed. It reports whether e was still there: false means it was
// evicted and its connection is being closed.
func (p *preauth) done(e *pending) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.removed {
		return false
	}
	p.removeLocked(e)
	return true
}

func (p *preauth) removeLocked(e *pending) {
	e.removed = true
	p.all.Remove(e.inAll)
	sl := p.bySrc[e.src]
	sl.Remove(e.inSrc)
	if sl.Len() == 0 {
		delete(p.bySrc, e.src)
	}
}

// pressured reports whether src, or the table, is at least half full: then
// QUIC makes new clients prove their address with a Retry first, so that
// Initials with a spoofed source cannot evict that source's handshakes.
func (p *preauth) pressured(src netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if 2*p.all.Len() >= p.max {
		return true
	}
	sl := p.bySrc[src]
	return sl != nil && 2*sl.Len() >= p.perSource
}

// len returns the number of connections in the table and from src.
func (p *preauth) len(src netip.Addr) (all, fromSrc int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sl := p.bySrc[src]; sl != nil {
		fromSrc = sl.Len()
	}
	return p.all.Len(), fromSrc
}
