package node

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latticelab/lattice/key"
)

// Workarounds for WireGuard's timing, which assumes a fixed endpoint and
// a lossless first exchange; here a peer's address changes under ICE and
// its first handshake often races its relay connection. The Bind calls
// these hooks as packets pass (noteSent, noteReceived, and the checks in
// its receive paths); none changes what WireGuard sees except by dropping
// or resending its own messages, and WireGuard authenticates every
// packet, so none can let anything through that it would refuse.
//
//   - Handshake resends: WireGuard retries a lost initiation only after
//     5 s, and the first one is often lost (the peer's relay connection
//     or NAT mapping is a moment behind its registration), so it is sent
//     again a few times quickly until a response arrives.
//   - Crossing initiations: two that cross cancel out (each side's answer
//     to the other's replaces its own pending initiation, so neither
//     completes until the 5 s retry; common over the relay's round trip).
//     The leading side drops the peer's initiation while its own is
//     unanswered. Unless the peer still resends that initiation
//     glareYield (1.3 s) after its first copy came: it did not answer ours (its
//     WireGuard can drop an initiation it took while making its own, with
//     "handshake initiation must be consumed first"), and resends of ours
//     are replays to it. The copy is let through once, and the leading
//     side answers it instead of waiting out the glare window.
//     The leading side's initiation can also be made while WireGuard
//     has the peer's in hand, passed before ours existed (a peer added
//     with a keepalive opens a handshake at once, while the peer's
//     initiation may be in WireGuard's queue): WireGuard's answer then
//     replaces ours, and ours, reaching the peer, replaces the peer's
//     own. So an initiation of ours made while WireGuard owes the peer an
//     answer is withheld until the answer goes out (then never sent:
//     WireGuard gave it up) or initHold passes (see noteInitiation).
//   - Peer heard: an initiation sent before the peer could take it (it
//     had not joined the relay or did not know our key yet: the usual
//     case when it has just registered) waited for the next resend, up to
//     300 ms. Once the peer shows it is there (a signal from it, or its
//     own initiation dropped as crossing ours), ours is sent again at
//     once, once per initiation. An initiation of ours that WireGuard
//     gave up for answering the peer's is not resent at all.
//   - Receiver-index routing: a direct packet from an address that is no
//     peer's path is matched by its receiver index, one we chose in a
//     handshake message we sent that peer. This is how a restarted node
//     hears the answer to its first handshake: the peer answers on its
//     old direct path before the restarted node's ICE has chosen that
//     address, and WireGuard refuses the resent initiation as a replay.
//   - Duplicate initiations: the peer's resends of one initiation (and
//     copies by the relay and the direct path) reach us close together.
//     WireGuard refuses a copy as a replay only once it has consumed the
//     first: its handshake workers (one per CPU) check the timestamp and
//     record it under separate locks, so two copies taken at once both
//     pass and each gets a response, with a different key. The peer
//     keeps the session of the response it reads first, and we the other:
//     its data is refused until its 10 s timers start a new handshake
//     (1 pair in a few thousand, pinged in a 100-node lab). A copy of the
//     initiation passed last is dropped here, within dupInitWindow.
//   - Settling: a lazy peer's keepalive, turned on when it goes direct,
//     waits for a session with no handshake under way (sessionSettled;
//     see peer.keepaliveWhenSettled): wireguard-go's immediate keepalive
//     would open a second handshake racing the first inside wireguard-go.
//   - Stale sessions: a transport message whose receiver index is none of
//     ours means the peer still uses a session from before we restarted;
//     the path's stale handler (Path.SetStaleHandler) lets the node open
//     a handshake at once instead of waiting for its timers.

// handshakes is a Path's share of the workarounds.
type handshakes struct {
	hsMu sync.Mutex // guards hs
	// hs is our initiation being resent, nil while none waits for an
	// answer: most of a large lab's idle peers never open a handshake.
	hs *resend

	// leads breaks ties between crossing handshakes (see crossing).
	leads atomic.Bool

	// indices are our latest handshake sender indices for this peer,
	// oldest first, guarded by Bind.mu. WireGuard keeps at most three
	// keypairs (previous, current, next), but every retried initiation
	// takes a new index, and it retries up to 18 times (90 s) while the
	// current keypair stays in use.
	indices []uint32
	// onStale and lastStale: see SetStaleHandler.
	onStale   atomic.Pointer[func()]
	lastStale atomic.Int64 // Unix ns

	// peerInit is the peer's latest initiation passed to WireGuard (the
	// first 8 bytes of its ephemeral key) and peerInitAt when (Unix ns),
	// guarded by hsMu: see duplicate.
	peerInit   uint64
	peerInitAt int64
	// crossInit is the peer's latest initiation dropped as crossing ours
	// (as peerInit) and crossAt when its first copy was (Unix ns; 0:
	// none since the last let through), guarded by hsMu: see crossing.
	crossInit uint64
	crossAt   int64

	// initAt is when an initiation last went either way (ours sent, or
	// the peer's let through to WireGuard), and authAt when a response or
	// a transport message from the peer last arrived (Unix ns): see
	// sessionSettled.
	initAt, authAt atomic.Int64

	// initDue is when WireGuard's answer to the peer's initiation last
	// passed to it is due (Unix ns; 0: answered, or none): an initiation
	// of ours made before then is withheld (see noteInitiation).
	initDue atomic.Int64

	// answerBy is when the hold on our packets to the peer ends while
	// WireGuard answers its initiation (Unix ns; 0: answered, or none),
	// and heldAt when that initiation came: see answerGate.
	answerBy, heldAt atomic.Int64
}

// resend is an initiation of ours that waits for its response.
type resend struct {
	init   []byte
	sent   time.Time
	timer  *time.Timer
	try    int
	kicked bool // sent again because the peer was heard (kick)
	// held: not sent yet, while WireGuard answers the peer's
	// initiation (see noteInitiation).
	held bool
}

// sessions is the Bind's share of the workarounds.
type sessions struct {
	byIndex   map[uint32]*Path // our handshake sender indices, guarded by Bind.mu
	byIndexRx atomic.Uint64    // direct packets from unknown addresses, matched by index

	// strays are the sources of recent transport messages that matched no
	// path and no index of ours (Unix ns), at most maxStrays: a peer
	// still on a session from before our restart, whose address our ICE
	// has not chosen yet. SetDirect tells the path's stale handler when
	// ICE chooses one.
	strayMu sync.Mutex
	strays  map[netip.AddrPort]int64
	staleRx atomic.Uint64 // transport messages for a session we do not have
	crossed atomic.Uint64 // the peer's initiations dropped for ours (crossing)
	// glareYields counts the peer's initiations let through after all:
	// it did not answer ours (crossing, glareYield).
	glareYields atomic.Uint64
	dupInit     atomic.Uint64 // copies of the peer's initiations dropped (duplicate)
	kicked      atomic.Uint64 // our initiations sent again because the peer was heard (kick)
	withheld    atomic.Uint64 // our initiations never sent: WireGuard answered the peer's instead (noteInitiation)
}

const (
	// maxIndices bounds Path.indices.
	maxIndices = 24
	// glareWindow bounds how long a leading side ignores the peer's
	// initiations while its own is unanswered.
	glareWindow = 2 * time.Second
	// glareYield is how long after its first copy a resend of the peer's
	// initiation shows the peer did not answer ours: its resends go 100,
	// 300, 700 and 1500 ms after it and stop once it answers ours, which
	// the kick its first copy set off (ours, sent again on it) has it do
	// within a round trip. So the 1.5 s resend, let through, can only
	// cross an answer of ours on a path over 750 ms one way; the 700 ms
	// one would on one over 350 ms (a satellite hop and a relay).
	glareYield = 1300 * time.Millisecond
	// initHold bounds how long an initiation of ours is withheld while
	// WireGuard answers the peer's (noteInitiation), counted from when
	// the Bind hands it over: the answer goes out once WireGuard's
	// handshake workers reach it (milliseconds, more on a busy machine
	// or behind other peers' initiations); past this WireGuard refused
	// it (a replay), and ours goes. Only that case waits it out.
	initHold = 50 * time.Millisecond
	// dupInitWindow is how long a copy of the peer's last initiation is
	// dropped (duplicate). A later copy goes through: if WireGuard lost
	// the first (its queue full), the peer's resend at 3 s still helps;
	// if it did not, WireGuard refuses it as a replay.
	dupInitWindow = 2 * time.Second
	// handshakeSettle bounds how long keepaliveWhenSettled waits for a
	// session: WireGuard's own retry interval (REKEY_TIMEOUT).
	handshakeSettle = 5 * time.Second
	// maxStrays bounds Bind.strays; strayAge is how long one counts.
	maxStrays = 64
	strayAge  = 5 * time.Second
)

// handshakeResends are the delays after an initiation at which it is
// sent again while no response came.
var handshakeResends = []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second}

// SetStaleHandler sets the function told, at most once a second, that the
// peer sends transport messages for a session we do not have (it has not
// noticed our restart). It runs on a receive goroutine and must not block.
func (p *Path) SetStaleHandler(f func()) { p.onStale.Store(&f) }

// stale runs the stale handler, at most once a second.
func (p *Path) stale(now int64) {
	last := p.lastStale.Load()
	if now-last < int64(time.Second) || !p.lastStale.CompareAndSwap(last, now) {
		return
	}
	if f := p.onStale.Load(); f != nil && *f != nil {
		(*f)()
	}
}

// SetLeads makes this side the one whose handshake wins when both open
// one at once. Exactly one side of a pair must lead: the node gives it to
// the side with the lower key, as ICE's controlling role.
func (p *Path) SetLeads(leads bool) { p.leads.Store(leads) }

// leads reports whether self leads toward peer: its key is the lower.
// The same side leads the pair's handshakes (SetLeads), controls ICE and
// opens the first handshake (Node.addPeer).
func leads(self, peer key.Public) bool { return bytes.Compare(self[:], peer[:]) < 0 }

// crossing reports whether pkt, arriving at now (Unix ns), is the peer's
// handshake initiation crossing ours on the way, to be dropped: the peer
// answers ours, and one handshake completes. yield says it is a copy of
// one dropped before that is let through (see glareYield).
func (p *Path) crossing(pkt []byte, now int64) (drop, yield bool) {
	if !isInitiation(pkt) || !p.leads.Load() {
		return false, false
	}
	eph := binary.LittleEndian.Uint64(pkt[8:16])
	p.hsMu.Lock()
	defer p.hsMu.Unlock()
	if p.hs == nil || time.Since(p.hs.sent) >= glareWindow {
		return false, false
	}
	switch {
	case eph != p.crossInit || p.crossAt == 0:
		p.crossInit, p.crossAt = eph, now
		return true, false
	case now-p.crossAt < int64(glareYield):
		return true, false
	}
	p.crossAt = 0 // once: its later copies are duplicates
	return false, true
}

// hasIndex reports whether idx is one of our sender indices for p, newest
// (the current session's) first. Callers hold Bind.mu.
func (p *Path) hasIndex(idx uint32) bool {
	for i := len(p.indices) - 1; i >= 0; i-- {
		if p.indices[i] == idx {
			return true
		}
	}
	return false
}

// stopResends cancels pending handshake resends: answered, the peer is
// gone, or WireGuard gave the initiation up. It reports whether the
// initiation was still withheld (noteInitiation), never sent.
func (p *Path) stopResends() (withheld bool) {
	p.hsMu.Lock()
	defer p.hsMu.Unlock()
	if p.hs != nil {
		p.hs.timer.Stop()
		withheld = p.hs.held
		p.hs = nil
	}
	return withheld
}

// forgetIndicesLocked drops p's entries from the index table. Callers
// hold b.mu.
func (b *Bind) forgetIndicesLocked(p *Path) {
	for _, i := range p.indices {
		if b.byIndex[i] == p {
			delete(b.byIndex, i)
		}
	}
}

// noteSent records what WireGuard sends p: an initiation to resend until
// answered, and the sender index of each handshake message. It returns
// bufs less an initiation withheld (see noteInitiation).
func (b *Bind) noteSent(p *Path, bufs [][]byte) [][]byte {
	var now int64
	withheld := -1
	for i, buf := range bufs {
		switch {
		case isData(buf):
			if now == 0 {
				now = time.Now().UnixNano()
				p.noteData(now)
			}
		case isInitiation(buf):
			p.initAt.Store(time.Now().UnixNano())
			p.wakeIdle()
			if b.noteInitiation(p, buf) {
				withheld = i
			}
			b.noteIndex(p, binary.LittleEndian.Uint32(buf[4:8]))
		case isResponse(buf):
			// Answering the peer's initiation replaced ours in
			// WireGuard's handshake state: a response to ours would
			// be refused, so resending it is useless, and one still
			// withheld is never sent.
			p.initDue.Store(0)
			if p.stopResends() {
				b.withheld.Add(1)
			}
			b.gate.answered(p)
			b.noteIndex(p, binary.LittleEndian.Uint32(buf[4:8]))
		}
	}
	if withheld < 0 {
		return bufs
	}
	// (WireGuard sends an initiation alone: this copy is the rare case.)
	rest := make([][]byte, 0, len(bufs)-1)
	rest = append(rest, bufs[:withheld]...)
	return append(rest, bufs[withheld+1:]...)
}

// noteReceived records what WireGuard receives from p: a response ends
// the resends, and either it or a transport message settles the session
// (the peer's initiations were recorded as they passed the Bind's checks,
// see duplicate).
func (b *Bind) noteReceived(p *Path, pkt []byte) {
	switch {
	case isTransport(pkt):
		now := time.Now().UnixNano()
		p.noteAuth(now)
		if isData(pkt) {
			p.noteData(now)
		}
	case isResponse(pkt):
		p.noteAuth(time.Now().UnixNano())
		b.noteResponse(p)
	}
}

// noteAuth records that something authenticated came from the peer at
// now (see sessionSettled). Only the first since the last initiation is
// written: the store would otherwise be on every received packet.
func (p *Path) noteAuth(now int64) {
	if p.authAt.Load() <= p.initAt.Load() {
		p.authAt.Store(now)
	}
}

// sessionSettled reports whether the peer has sent something
// authenticated (a response, a transport message) since the last
// initiation either way: a WireGuard session is up and no handshake is
// under way. Received packets count before WireGuard checks them: a
// forged one can end keepaliveWhenSettled's wait early, which costs only
// the race the wait avoids, never a packet.
func (p *Path) sessionSettled() bool {
	auth := p.authAt.Load()
	return auth != 0 && auth >= p.initAt.Load()
}

// noteInitiation records our initiation pkt, to resend until answered,
// and reports whether it is withheld instead of sent now: WireGuard has
// the peer's initiation in hand (passed within initHold, no answer yet),
// so ours was made before it read the peer's, and its answer will
// replace ours in its handshake state. Sent, ours would also replace the
// peer's pending one in the peer's WireGuard (a side that does not lead
// answers every initiation), and neither answer would complete a
// handshake until WireGuard's retry, 5 s later. Withheld, it is never
// sent once the answer goes out (noteSent), or sent when initHold
// passes without one.
func (b *Bind) noteInitiation(p *Path, pkt []byte) (withheld bool) {
	p.hsMu.Lock()
	defer p.hsMu.Unlock()
	if p.hs != nil {
		p.hs.timer.Stop()
	}
	// A record of its own: a timer of the last one's that fired as this
	// replaced it finds it replaced, and does nothing.
	now := time.Now()
	hs := &resend{init: append([]byte(nil), pkt...), sent: now}
	p.hs = hs
	if due := p.initDue.Load(); due > now.UnixNano() {
		hs.held = true
		hs.timer = time.AfterFunc(time.Duration(due-now.UnixNano()), func() { b.releaseInitiation(p, hs) })
		return true
	}
	hs.timer = time.AfterFunc(handshakeResends[0], func() { b.resendInitiation(p, hs) })
	return false
}

// releaseInitiation sends our initiation withheld in hs
// (noteInitiation): WireGuard did not answer the peer's within initHold.
// Its resends are timed from now.
func (b *Bind) releaseInitiation(p *Path, hs *resend) {
	p.hsMu.Lock()
	if p.hs != hs || !hs.held {
		p.hsMu.Unlock()
		return
	}
	hs.held = false
	hs.sent = time.Now()
	hs.timer = time.AfterFunc(handshakeResends[0], func() { b.resendInitiation(p, hs) })
	pkt := append([]byte(nil), hs.init...)
	p.hsMu.Unlock()
	_ = b.send(p, [][]byte{pkt})
}

// resendInitiation sends our initiation in hs again, if it is still the
// one waiting for an answer and was sent (a timer that fired as a newer
// one replaced it does nothing).
func (b *Bind) resendInitiation(p *Path, hs *resend) {
	p.hsMu.Lock()
	if p.hs != hs || hs.held {
		p.hsMu.Unlock()
		return
	}
	pkt := append([]byte(nil), hs.init...)
	hs.try++
	if hs.try < len(handshakeResends) {
		hs.timer = time.AfterFunc(handshakeResends[hs.try]-handshakeResends[hs.try-1], func() { b.resendInitiation(p, hs) })
	}
	try := hs.try
	p.hsMu.Unlock()
	if _, direct := p.Direct(); !direct && try == relayUnansweredTry {
		if f := b.unanswered.Load(); f != nil {
			(*f)()
		}
	}
	_ = b.send(p, [][]byte{pkt})
}

// PeerHeard tells the Bind that the peer behind p showed it is there: a
// signal from it came through control. An initiation of ours still
// unanswered is sent again now (see kick).
func (b *Bind) PeerHeard(p *Path) { b.kick(p) }

// kick sends our unanswered initiation to p again at once, if it has not
// been kicked yet: the peer is there now, and the copy sent before may
// have reached no one (the peer had not joined the relay or did not know
// our key). A copy the peer did get is dropped by the peer's Bind
// (duplicate), or refused by its WireGuard as a replay.
func (b *Bind) kick(p *Path) {
	p.hsMu.Lock()
	if p.hs == nil || p.hs.kicked || p.hs.held {
		p.hsMu.Unlock()
		return
	}
	p.hs.kicked = true
	pkt := append([]byte(nil), p.hs.init...)
	p.hsMu.Unlock()
	b.kicked.Add(1)
	_ = b.send(p, [][]byte{pkt})
}

// RelayUp tells the Bind its relay connection came up: an initiation to p
// still unanswered may have been sent, or kicked, while it was between
// attempts, and lost (one sent while it was dialing was queued and went
// behind its HELLO); it is sent again now. It is not p's kick (a signal from the peer still
// sends it once more).
func (b *Bind) RelayUp(p *Path) {
	if _, direct := p.Direct(); direct {
		return
	}
	p.hsMu.Lock()
	if p.hs == nil || p.hs.held {
		p.hsMu.Unlock()
		return
	}
	pkt := append([]byte(nil), p.hs.init...)
	p.hsMu.Unlock()
	_ = b.send(p, [][]byte{pkt})
}

// relayUnansweredTry is the resend (the third: 700 ms after the
// initiation) at which an initiation still unanswered through the relay
// is reported to SetRelayUnanswered's function.
const relayUnansweredTry = 3

// SetRelayUnanswered sets the function told (on a timer goroutine; it
// must not block) when a handshake initiation sent through the relay is
// still unanswered after its third resend. The node probes its uplinks
// then: a relay connection through a NAT that rebooted is dead, and
// without a direct path going silent (a lazy node's idle peers have
// none) nothing else would notice before TCP's or NATS' own timeouts.
func (b *Bind) SetRelayUnanswered(f func()) { b.unanswered.Store(&f) }

// noteResponse ends the resends of our initiation: answered. One still
// withheld (noteInitiation) was never sent, so nothing received answers
// it (a stale or forged response): it stays.
func (b *Bind) noteResponse(p *Path) {
	p.hsMu.Lock()
	defer p.hsMu.Unlock()
	if p.hs != nil && !p.hs.held {
		p.hs.timer.Stop()
		p.hs = nil
	}
}

// noteIndex records the sender index of a handshake message we send p:
// the peer's responses, cookie replies and transport messages carry it
// as their receiver index.
func (b *Bind) noteIndex(p *Path, idx uint32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byIndex[idx] == p {
		return
	}
	if len(p.indices) == maxIndices {
		if old := p.indices[0]; b.byIndex[old] == p {
			delete(b.byIndex, old)
		}
		p.indices = append(p.indices[:0], p.indices[1:]...)
	}
	p.indices = append(p.indices, idx)
	b.byIndex[idx] = p
}

// receiverIndex is the receiver index of a WireGuard response (92 bytes),
// cookie reply (64) or transport message; initiations carry none.
func receiverIndex(pkt []byte) (uint32, bool) {
	switch {
	case isResponse(pkt):
		return binary.LittleEndian.Uint32(pkt[8:12]), true
	case len(pkt) == cookieSize && pkt[0] == 3, isTransport(pkt):
		return binary.LittleEndian.Uint32(pkt[4:8]), true
	}
	return 0, false
}

// matchIndexLocked is the path a direct packet from an address that is no
// peer's path belongs to by its receiver index, or nil; a transport
// message that matches nothing is remembered as a stray. Callers hold
// b.mu (read).
func (b *Bind) matchIndexLocked(pkt []byte, from netip.AddrPort, now int64) *Path {
	if idx, ok := receiverIndex(pkt); ok {
		if p := b.byIndex[idx]; p != nil {
			b.byIndexRx.Add(1)
			return p
		}
	}
	if isTransport(pkt) {
		b.noteStray(from, now)
	}
	return nil
}

// checkLocked inspects a packet from p: drop says it is an initiation
// crossing ours or a copy of one passed (duplicate), stale that it is a transport message for a
// session we do not have (counted), held that it is the peer's new
// initiation, which waits for b.gate.settle before WireGuard takes it
// (answerGate). Callers hold b.mu (read).
func (b *Bind) checkLocked(p *Path, pkt []byte, now int64) (drop, crossed, stale, held bool) {
	switch drop, yield := p.crossing(pkt, now); {
	case drop:
		b.crossed.Add(1)
		return true, true, false, false
	case yield:
		b.glareYields.Add(1)
	}
	if p.duplicate(pkt, now) {
		b.dupInit.Add(1)
		return true, false, false, false
	}
	if isInitiation(pkt) {
		// WireGuard owes an answer from here (see noteInitiation), and
		// again from when it is handed over (receiveDirect,
		// receiveRelayed).
		p.owesAnswer(now)
		return false, false, false, b.gate.hold(p, now)
	}
	return false, false, b.staleSessionLocked(p, pkt), false
}

// duplicate reports whether pkt is a copy of the peer's initiation passed
// to WireGuard within dupInitWindow, and otherwise records pkt as that
// initiation if it is one (see "Duplicate initiations" above). An
// initiation's ephemeral key is fresh for each: equal keys are copies.
func (p *Path) duplicate(pkt []byte, now int64) bool {
	if !isInitiation(pkt) || p.pending.Load() {
		// (WireGuard may not have started a pending path's peer and
		// drop the initiation: its copies must not be dropped here.)
		return false
	}
	eph := binary.LittleEndian.Uint64(pkt[8:16])
	p.hsMu.Lock()
	defer p.hsMu.Unlock()
	if eph == p.peerInit && now-p.peerInitAt < int64(dupInitWindow) {
		return true
	}
	p.peerInit, p.peerInitAt = eph, now
	// Under way from here, not from when WireGuard reads it: the
	// restore of a trimmed peer and the queue toward WireGuard take
	// milliseconds, in which our own keepalive must not start another.
	p.initAt.Store(now)
	return false
}

// owesAnswer records that WireGuard has the peer's initiation in hand as
// of now (Unix ns): our initiations made within initHold are withheld
// (noteInitiation).
func (p *Path) owesAnswer(now int64) { p.initDue.Store(now + int64(initHold)) }

// staleSessionLocked reports (and counts) whether pkt is a transport
// message for none of our sessions with p. Callers hold b.mu (read).
func (b *Bind) staleSessionLocked(p *Path, pkt []byte) bool {
	if !isTransport(pkt) || p.hasIndex(binary.LittleEndian.Uint32(pkt[4:8])) {
		return false
	}
	b.staleRx.Add(1)
	return true
}

// noteStray records the source of a transport message that matched
// nothing.
func (b *Bind) noteStray(from netip.AddrPort, now int64) {
	b.strayMu.Lock()
	defer b.strayMu.Unlock()
	if b.strays == nil || len(b.strays) >= maxStrays {
		b.strays = map[netip.AddrPort]int64{}
	}
	b.strays[from] = now
}

// strayFrom reports (and forgets) whether addr sent a stray transport
// message lately.
func (b *Bind) strayFrom(addr netip.AddrPort) bool {
	b.strayMu.Lock()
	defer b.strayMu.Unlock()
	t, ok := b.strays[addr]
	delete(b.strays, addr)
	return ok && time.Since(time.Unix(0, t)) < strayAge
}

// Stale counts transport messages for a session we do not have.
func (b *Bind) Stale() uint64 { return b.staleRx.Load() }

// ByIndex counts direct packets from addresses that were no peer's path,
// accepted because their receiver index was one of ours.
func (b *Bind) ByIndex() uint64 { return b.byIndexRx.Load() }

// Crossed counts the peers' handshake initiations dropped because ours
// was on its way (see Path.crossing).
func (b *Bind) Crossed() uint64 { return b.crossed.Load() }

// GlareYields counts peers' initiations let through after copies of
// them were dropped as crossing ours: the peer did not answer ours (see
// Path.crossing).
func (b *Bind) GlareYields() uint64 { return b.glareYields.Load() }

// DuplicateInitiations counts copies of peers' initiations dropped.
func (b *Bind) DuplicateInitiations() uint64 { return b.dupInit.Load() }

// Withheld counts our initiations never sent: WireGuard made them while
// it had the peer's in hand, and answered that instead (see
// noteInitiation).
func (b *Bind) Withheld() uint64 { return b.withheld.Load() }

// Kicked counts our initiations sent again at once because the peer was
// heard from while they were unanswered (see Bind.kick).
func (b *Bind) Kicked() uint64 { return b.kicked.Load() }
