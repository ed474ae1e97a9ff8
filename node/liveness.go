package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/ice/v4"
)

// Liveness of a direct path: hard while it carries traffic, rare while it
// is idle (issue 22: no per-peer-per-second timers for idle peers).
//
//   - Idle: ICE consent (RFC 7675, consent.go) every consentInterval,
//     ±20%, and the path is dead after DeadAfter without an answer. The
//     answers to our checks, the peer's own checks and anything WireGuard
//     receives on the path all count.
//   - Carrying traffic: the Bind notes the first WireGuard data packet sent
//     directly after the path last answered (Path.noteDirectSent). If
//     nothing comes back on the path within suspectAfter, the agent sends
//     a consent check at once and again every pokeEvery; if still nothing
//     has come back activeDead after that first unanswered packet (or the
//     peer's data meanwhile comes through the relay: it doubts the path
//     too), the path is in doubt: the peer is reported relayed and the
//     Bind sends every packet both ways, direct and through the relay
//     (the hedge). The first answer on the path ends the hedge; hedgeDead
//     of silence ends the path (the relay alone, and a new attempt later).
//
// The hedge is what makes a second's bound safe. A path that is only slow
// to answer (a machine starved of CPU, a peer that still answers through
// the relay while it learns of the nomination) loses nothing: its packets
// still go direct, the relay's copies are dropped by WireGuard's replay
// window, and the path is back within a check's round trip. A dead path
// costs a second of traffic, not DeadAfter. Like Tailscale's magicsock,
// which heartbeats a path only while the peer is active and sends both
// ways while the path is unconfirmed.
//
// A path whose traffic stopped costs nothing here: the actor sleeps until
// the Bind's next direct data packet kicks it.

const (
	// defaultDeadAfter is ICEConfig.DeadAfter's default: with consent
	// every 5 s, three checks of each side may go missing.
	defaultDeadAfter = 20 * time.Second
	// consentMax is RFC 7675's consent check interval (section 5.1).
	consentMax = 5 * time.Second
	// suspectAfter is how long a data packet sent direct may go without
	// anything coming back before the path is checked at once.
	suspectAfter = 200 * time.Millisecond
	// pokeEvery spaces the checks of a suspect path (one may be lost).
	pokeEvery = 150 * time.Millisecond
	// activeDeadMin is how long after the first unanswered data packet a
	// path carrying traffic is declared dead, at least (longer on a path
	// with a long round trip: activeDead).
	activeDeadMin = 700 * time.Millisecond
	// probeAfter is how long a dead direct path must have been silent
	// before the uplinks are probed (directDead): DeadAfter's old default.
	probeAfter = 5 * time.Second
)

// The reasons a hedge begins and ends with (SwitchReason buckets them).
const (
	reasonUnanswered    = "direct path unanswered while carrying traffic"
	reasonAnsweredAgain = "direct path answered again"
)

// hedgeDead is how long a hedged path may stay silent before it is dead.
func hedgeDead(deadAfter time.Duration) time.Duration { return min(deadAfter, probeAfter) }

// pionTick is how often a pion agent's loop runs at most: it checks
// consent on every tick, so it cannot check less often than this.
const pionTick = 2 * time.Second

// pionConsent reports whether the agents check consent themselves (an
// interval within pion's tick, as the lab's short DeadAfters ask) or the
// node does (consent.go).
func pionConsent(deadAfter time.Duration) bool { return consentInterval(deadAfter) <= pionTick }

// consentInterval is how often an idle direct path's agent checks
// consent: RFC 7675's 5 s, or DeadAfter/4 if that is shorter (at least
// three checks must go missing before DeadAfter drops a working path).
func consentInterval(deadAfter time.Duration) time.Duration {
	return min(consentMax, deadAfter/4)
}

// jitter returns d within ±pct percent, drawn from crypto/rand (which a
// deterministic lab run seeds): agents started at one instant (a node
// joining a mesh) do not check consent in lockstep.
func jitter(d time.Duration, pct int64) time.Duration {
	var b [8]byte
	_, _ = rand.Read(b[:])
	span := int64(d) * pct / 100
	if span <= 0 {
		return d
	}
	return d - time.Duration(span) + time.Duration(binary.LittleEndian.Uint64(b[:])%uint64(2*span+1))
}

// liveness is the part of a Path the active watch uses.
type liveness struct {
	// unanswered is when the first WireGuard data packet went out
	// directly after the path last answered (Unix ns; 0: none yet).
	unanswered atomic.Int64
	// answered is the latest answer the actor saw that the Bind does not
	// (an ICE check or its response; Unix ns).
	answered atomic.Int64
	// kick is set while the watch sleeps; the next direct data packet
	// takes and calls it.
	kick atomic.Pointer[func()]
	// rtt is the last consent round trip (ns; 0: none yet).
	rtt atomic.Int64
	// relayRx is when WireGuard data last came from the peer through the
	// relay (Unix ns).
	relayRx atomic.Int64
	// replay holds the last data packets sent (see replayRing).
	replay atomic.Pointer[replayRing]
	// hedge is set while the direct path is in doubt: the Bind sends
	// through the relay too.
	hedge atomic.Bool
}

// RTT is the direct path's last consent round trip (zero: not measured).
func (p *Path) RTT() time.Duration { return time.Duration(p.rtt.Load()) }

// noteDirectSent records WireGuard packets sent on the direct path. Only
// data counts: keepalives and handshakes are WireGuard's own.
func (p *Path) noteDirectSent(bufs [][]byte) {
	if !slices.ContainsFunc(bufs, isData) {
		return
	}
	if u := p.unanswered.Load(); u <= max(p.lastDirectRx.Load(), p.answered.Load()) {
		p.unanswered.Store(time.Now().UnixNano())
	}
	if k := p.kick.Load(); k != nil && p.kick.CompareAndSwap(k, nil) {
		(*k)()
	}
}

// pathWatch is the actor's state for watching a direct path; it exists
// only while the peer is direct.
type pathWatch struct {
	session uint64
	remote  ice.Candidate // the selected pair's remote end, whose LastReceived counts
	creds   consentCreds
	timer   *time.Timer // the next look at a path carrying traffic
	consent *time.Timer // the next consent check
	// The checks sent since the path last answered: the first one's time
	// and the last one's, and how many.
	firstPoke, lastPoke time.Time
	pokes               int
	// hedged is when the path went into doubt (zero: it is not).
	hedged time.Time
}

// watchDirect starts watching the direct path the attempt of the current
// session just selected.
func (p *peer) watchDirect(ctx context.Context, res *iceResult) {
	p.stopWatch()
	ufrag, pwd, err := p.agent.GetRemoteUserCredentials()
	if err != nil {
		p.env.log.Debug("consent credentials", "peer", p.info.Name, "err", err)
	}
	p.path.unanswered.Store(0)
	p.path.answered.Store(p.env.now().UnixNano())
	p.path.rtt.Store(0)
	if s, ok := p.agent.GetSelectedCandidatePairStats(); ok {
		p.path.rtt.Store(int64(s.CurrentRoundTripTime * float64(time.Second)))
	}
	p.watch = &pathWatch{session: p.session, remote: res.remote, creds: consentCreds{
		to: res.addr, localUfrag: p.ufrag, remoteUfrag: ufrag, remotePwd: pwd,
		controlling: p.controlling, tieBreaker: newTieBreaker(),
	}}
	if !pionConsent(p.env.cfg.DeadAfter) {
		p.armConsent(ctx)
	}
	p.sleepWatch(ctx, 0)
}

// stopWatch ends the watch (the path is no longer direct, or the agent
// that selected it is gone).
func (p *peer) stopWatch() {
	w := p.watch
	if w == nil {
		return
	}
	for _, t := range []*time.Timer{w.timer, w.consent} {
		if t != nil {
			t.Stop()
		}
	}
	p.path.kick.Store(nil)
	p.path.hedge.Store(false)
	if p.env.consent != nil {
		p.env.consent.forget(&w.creds)
	}
	p.watch = nil
}

// armConsent schedules the next consent check, RFC 7675's interval ±20%.
func (p *peer) armConsent(ctx context.Context) {
	session := p.session
	p.watch.consent = time.AfterFunc(jitter(consentInterval(p.env.cfg.DeadAfter), 20), func() {
		if ctx.Err() == nil {
			p.post(peerEvent{consent: true, session: session})
		}
	})
}

// onConsent checks consent on a direct path, or drops it once nothing
// has come back on it for DeadAfter.
func (p *peer) onConsent(ctx context.Context, session uint64) {
	w := p.watch
	if w == nil || session != w.session || session != p.session {
		return
	}
	now := p.env.now()
	if silent := now.Sub(time.Unix(0, p.lastAnswer())); silent >= p.env.cfg.DeadAfter {
		p.directDead(ctx, fmt.Sprintf("direct path went silent (no answer for %s)", p.env.cfg.DeadAfter), silent)
		return
	}
	// A path that carries WireGuard from the peer needs no check of its
	// own: the traffic watch covers what we send.
	if now.Sub(p.path.LastDirectReceive()) >= consentInterval(p.env.cfg.DeadAfter) {
		p.sendConsent()
	}
	p.armConsent(ctx)
}

// retireAgent closes the agent of a direct path as soon as ICE selects it
// (the node checks its consent; consent.go answers the peer's checks in
// its place), with what the attempt kept for it: its candidates, its
// offer and answer timers. The path, its watch and the attempt's session
// stay; a new attempt, or the path's end, finds no agent to close.
//
// A selected pair has been proven both ways: our check was answered and
// the peer's nomination came (controlled), or our nomination was
// answered (controlling). What the peer's agent may still need from ours,
// the answer to a repeated nomination or to its own check of the pair,
// the responder gives. Kept until the first consent tick, 5 s later, the
// agents of a 100-node lab whose every pair woke at once numbered in the
// thousands (each with its goroutines, buffers and timers): most of the
// lab's peak memory (docs/PERFORMANCE.md).
func (p *peer) retireAgent() {
	if p.agent == nil || p.env.consent == nil || p.watch == nil || pionConsent(p.env.cfg.DeadAfter) {
		return
	}
	if p.watch.remote != nil {
		if r := p.watch.remote.LastReceived(); r.UnixNano() > p.path.answered.Load() {
			p.path.answered.Store(r.UnixNano())
		}
		p.watch.remote = nil
	}
	p.env.consent.respondFor(p.path, &p.watch.creds, p.pwd)
	if p.attemptDone != nil {
		p.attemptDone()
		p.attemptDone = nil
	}
	for _, t := range []**time.Timer{&p.offerTimer, &p.answerTimer} {
		if *t != nil {
			(*t).Stop()
			*t = nil
		}
	}
	_ = p.agent.Close()
	p.agent = nil
	p.localCands, p.ownAddrs, p.pending = nil, nil, nil
}

// sendConsent sends one consent request on the direct path.
func (p *peer) sendConsent() {
	if pionConsent(p.env.cfg.DeadAfter) {
		// pion has no call for "check consent now"; setting a property
		// that asks for a connectivity check is the one that does, and
		// it changes nothing else (full ICE at both ends).
		_ = p.agent.SetRemoteICELite(false)
		return
	}
	if p.env.consent == nil {
		return
	}
	if err := p.env.consent.send(p.path, &p.watch.creds); err != nil {
		p.env.log.Debug("consent", "peer", p.info.Name, "err", err)
	}
}

// lastAnswer is when the direct path last answered (Unix ns): WireGuard
// from the peer, the answer to a consent request, or the peer's own check.
func (p *peer) lastAnswer() int64 {
	if t := p.watch.remote; t != nil {
		if r := t.LastReceived(); !r.IsZero() && r.UnixNano() > p.path.answered.Load() {
			p.path.answered.Store(r.UnixNano())
		}
	}
	return max(p.path.lastDirectRx.Load(), p.path.answered.Load())
}

// directDead falls back to the relay from a dead direct path; a lazy
// peer that has been quiet takes it as the other side going idle. The
// uplinks are probed (directLost) once the path has been silent for
// probeAfter: moving traffic to the relay is cheap and undone as soon as
// an attempt connects, but a failed probe tears down the relay and
// control connections, and their reconnects (dials that time out after
// 10 s) then decide when signaling works again.
func (p *peer) directDead(ctx context.Context, reason string, silent time.Duration) {
	if p.quietPeer() {
		p.goIdle(ctx, reasonIdleLost)
		return
	}
	p.fail(ctx, reason)
	lost := p.env.directLost
	if lost == nil {
		return
	}
	if wait := min(p.env.cfg.DeadAfter, probeAfter) - silent; wait > 0 {
		time.AfterFunc(wait, func() {
			if _, direct := p.path.Direct(); !direct && ctx.Err() == nil {
				lost()
			}
		})
		return
	}
	lost()
}

// sleepWatch waits for the next direct data packet; u is the unanswered
// mark the actor last saw (a packet sent since then wakes it at once).
func (p *peer) sleepWatch(ctx context.Context, u int64) {
	session := p.session
	k := func() {
		if ctx.Err() == nil {
			p.post(peerEvent{liveness: true, session: session})
		}
	}
	p.path.kick.Store(&k)
	if p.path.unanswered.Load() != u && p.path.kick.CompareAndSwap(&k, nil) {
		p.checkLivenessIn(ctx, 0)
	}
}

// checkLivenessIn runs onLiveness after d.
func (p *peer) checkLivenessIn(ctx context.Context, d time.Duration) {
	w := p.watch
	if w.timer != nil {
		w.timer.Stop()
	}
	session := p.session
	w.timer = time.AfterFunc(d, func() {
		if ctx.Err() == nil {
			p.post(peerEvent{liveness: true, session: session})
		}
	})
}

// onLiveness looks at a direct path that carried data: answered since the
// first unanswered packet, it sleeps (and a hedge ends); otherwise it
// checks consent at once, hedges once activeDead has passed, and drops the
// path once it has been silent for hedgeDead while hedged.
func (p *peer) onLiveness(ctx context.Context, session uint64) {
	w := p.watch
	if w == nil || session != w.session || session != p.session {
		return
	}
	u := p.path.unanswered.Load()
	if u == 0 || p.lastAnswer() >= u {
		if !w.hedged.IsZero() {
			p.unhedge()
		}
		w.pokes = 0
		p.sleepWatch(ctx, u)
		return
	}
	now := p.env.now()
	age := now.Sub(time.Unix(0, u))
	dead, wait := p.activeDead()
	switch {
	case age < suspectAfter:
		p.checkLivenessIn(ctx, suspectAfter-age)
		return
	case !w.hedged.IsZero():
		if silent := now.Sub(time.Unix(0, p.lastAnswer())); silent >= hedgeDead(p.env.cfg.DeadAfter) {
			p.directDead(ctx, fmt.Sprintf("direct path went silent while carrying traffic (nothing back for %s)", silent.Round(10*time.Millisecond)), silent)
			return
		}
	case p.path.relayRx.Load() > p.lastAnswer():
		// The peer doubts the path too: its data comes through the
		// relay, and ours went unanswered.
		p.hedgeDirect(fmt.Sprintf("%s (nothing back for %s; the peer sends through the relay)", reasonUnanswered, age.Round(10*time.Millisecond)))
	case age >= dead && w.pokes >= 2 && now.Sub(w.firstPoke) >= wait:
		// Unanswered by our own checks too: a machine too busy to run
		// this actor on time sent them late, and gets as long for them.
		p.hedgeDirect(fmt.Sprintf("%s (nothing back for %s)", reasonUnanswered, age.Round(10*time.Millisecond)))
	}
	if w.pokes == 0 || now.Sub(w.lastPoke) >= pokeEvery {
		if w.pokes == 0 {
			w.firstPoke = now
		}
		w.pokes++
		w.lastPoke = now
		p.sendConsent()
	}
	next := pokeEvery
	if w.pokes >= 2 && w.hedged.IsZero() {
		next = min(next, max(dead-age, w.firstPoke.Add(wait).Sub(now), time.Millisecond))
	}
	p.checkLivenessIn(ctx, next)
}

// hedgeDirect puts the direct path in doubt: the peer is reported
// relayed, and the Bind sends every packet through the relay as well as
// directly until the path answers (unhedge) or hedgeDead passes. The
// packets the path may have swallowed go out again.
func (p *peer) hedgeDirect(reason string) {
	p.watch.hedged = p.env.now()
	p.path.hedge.Store(true)
	reason += "; sending through the relay too until it answers"
	p.record(PathRelay, netip.AddrPort{}, reason)
	p.setWhy(reason, time.Time{})
	p.replayRecent()
}

// unhedge ends a hedge: the direct path answered again.
func (p *peer) unhedge() {
	p.watch.hedged = time.Time{}
	p.path.hedge.Store(false)
	if a, ok := p.path.Direct(); ok {
		p.record(PathDirect, a, reasonAnsweredAgain)
	}
}

// activeDead is how long a direct path carrying traffic may go without an
// answer (activeDeadMin, or a few round trips more on a slow path), and
// how long the first check sent meanwhile must have gone unanswered.
func (p *peer) activeDead() (dead, wait time.Duration) {
	rtt := p.path.RTT()
	return min(max(activeDeadMin, suspectAfter+4*rtt), p.env.cfg.DeadAfter), max(activeDeadMin-suspectAfter, 4*rtt)
}

// Replay. A path that dies swallows what was sent on it until the watch
// notices (activeDead), and one that comes back after an outage finds the
// inner transport backed off: a TCP flow whose retransmission went into
// the void waits for the next, seconds later (6 to 13 s after a 10 s
// outage). So each path keeps the last few data packets it sent, and when
// the peer's path switches (to the relay from a dead direct path, or to a
// new direct path) the recent ones go out again on the new path. A packet
// the peer already has is dropped by WireGuard's replay window; one it
// never got arrives now, and the inner TCP answers it (an ACK, or a
// duplicate ACK that retransmits at once) instead of waiting for its
// timer.

// replayLen is how many data packets a path keeps; replayFor is how old
// they may be and still go out again.
const (
	replayLen = 8
	replayFor = 5 * time.Second
)

// replayRing is a path's last data packets; it exists once the path has
// sent data.
type replayRing struct {
	mu   sync.Mutex // guards the following fields
	pkts [replayLen][]byte
	at   [replayLen]int64
	next int
}

// keepForReplay copies the data packets of bufs into the path's ring:
// only the last replayLen of them, which are all the ring keeps, under
// one lock and one reading of the clock (a batch is sent at one moment).
// Copying every packet of every batch was about 3% of the agent path's
// CPU (BenchmarkAgentPath/tun).
func (p *Path) keepForReplay(bufs [][]byte) {
	var keep [replayLen]int
	n := 0
	for i := len(bufs) - 1; i >= 0 && n < replayLen; i-- {
		if isData(bufs[i]) {
			keep[n] = i
			n++
		}
	}
	if n == 0 {
		return
	}
	r := p.replay.Load()
	if r == nil {
		r = &replayRing{}
		if !p.replay.CompareAndSwap(nil, r) {
			r = p.replay.Load()
		}
	}
	now := time.Now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := n - 1; k >= 0; k-- { // oldest first
		r.pkts[r.next] = append(r.pkts[r.next][:0], bufs[keep[k]]...)
		r.at[r.next] = now
		r.next = (r.next + 1) % replayLen
	}
}

// recent returns copies of the packets kept within replayFor of now,
// oldest first.
func (r *replayRing) recent(now int64) [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]byte
	for i := range replayLen {
		j := (r.next + i) % replayLen
		if r.pkts[j] != nil && now-r.at[j] <= int64(replayFor) {
			out = append(out, append([]byte(nil), r.pkts[j]...))
		}
	}
	return out
}

// replayRecent sends the path's recent data packets again on its current
// path (see above).
func (p *peer) replayRecent() {
	r := p.path.replay.Load()
	if r == nil {
		return
	}
	pkts := r.recent(p.env.now().UnixNano())
	if len(pkts) == 0 {
		return
	}
	if err := p.env.bind.sendWatched(p.path, pkts, false); err != nil {
		p.env.log.Debug("replay", "peer", p.info.Name, "err", err)
	}
}
