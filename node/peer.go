package node

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/ice/v4"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// peerEvent is what drives a peer's goroutine.
type peerEvent struct {
	signal     *Signal              // a signal from the peer
	local      string               // one of our candidates, to signal
	connected  *iceResult           // an ICE attempt finished
	state      *ice.ConnectionState // the agent's state changed
	session    uint64               // the session a connected/state event belongs to
	retry      bool                 // the backoff timer fired
	wake       bool                 // data for an idle (lazy) peer
	idleCheck  bool                 // the idle timer fired (lazy.go)
	reoffer    bool                 // the peer has not answered our credentials (see offerAgain)
	unanswered bool                 // AttemptTimeout passed without the peer's credentials (see expireUnanswered)
	// checkDirect: restartCheck has passed since the peer restarted ICE
	// while we were direct (see restartWhileDirect).
	checkDirect bool
	liveness    bool // the direct path's watch: data went out, or its timer fired (liveness.go)
	consent     bool // time for the direct path's next consent check (liveness.go)
	changed     bool // the node's network may have changed: retry a peer that had no pair (nopair.go)
	reconnected bool // control is reachable again after an outage: retry any peer waiting (nopair.go)
	begin       bool // the peer's first event: its first attempt, or idle
	settle      bool // time to look again whether the handshake has settled (settle)
	end         bool // the peer's last event (close): stop everything
}

// peerEnv is what a peer needs from its node.
type peerEnv struct {
	priv     key.Private
	pub      key.Public
	bind     *Bind
	udpMux   ice.UniversalUDPMux
	agentOpt []ice.AgentOption
	cfg      ICEConfig
	log      *slog.Logger
	signal   func(ctx context.Context, to string, payload []byte) error
	now      func() time.Time
	// directLost, if set, is told (without blocking) that a direct path
	// went silent.
	directLost func()
	// epoch, if set, is our registration's epoch, sealed into signals.
	epoch func() uint64
	// stun names control's STUN servers (for status's explanations).
	stun []string
	// keepalive, if set, turns WireGuard's persistent keepalive to the
	// peer on or off (lazy peers: on only while direct).
	keepalive func(pk key.Public, on bool)
	// trim, if set, takes an idle lazy peer out of WireGuard (trim.go)
	// unless there was traffic since (Unix ns); false: there was.
	trim func(p *peer, since int64) bool
	// switched, if set, counts each path event the peer records.
	switched func(PathEvent)
	// ice, if set, counts the peer's ICE attempts and their outcomes.
	ice *iceCounts
	// consent sends consent requests on a direct path (consent.go).
	consent *consentTable
}

// peer is the per-peer actor: it runs the peer's ICE agents and picks its
// path (Bind.SetDirect). Events reach it through its mailbox, which runs
// drain on a goroutine while events wait and none once they are handled
// (mailbox.go): all the actor's state is owned by that one goroutine at a
// time.
type peer struct {
	env    *peerEnv
	info   controlapi.Peer
	path   *Path
	box    mailbox
	ctx    context.Context // the actor's, ended by close
	cancel context.CancelFunc
	// ended is done once the end event is handled (a WaitGroup, not a
	// channel: no allocation for each of a large mesh's peers).
	ended sync.WaitGroup
	// epoch is the peer's registration epoch as we know it (see
	// learnEpoch); unlike the rest, other goroutines write it.
	epoch atomic.Uint64
	// recordEpoch is the epoch of the record control last gave (addPeer):
	// signals can teach epoch a later one first.
	recordEpoch atomic.Uint64
	// shared is the box key signals to and from the peer are sealed
	// with, computed on first use (sharedKey) and kept for the peer's
	// life: a peer whose key changes is a new peer (addPeer). A peer
	// that never signals (most of a large lazy mesh) has none.
	shared atomic.Pointer[key.Shared]

	session uint64 // our current ICE session
	remote  replayGuard
	// sigq is our signals' queue on their way to control, made on the
	// first signal (queue): a peer that never attempts, as most of a
	// large lazy mesh, does not hold one.
	sigq atomic.Pointer[signalQueue]
	// *attempt is the direct attempts' state: nil while the peer is idle
	// (lazy.go), so an idle peer does not hold it; drain makes it before
	// any other event is handled.
	*attempt
	// Lazy connections (lazy.go): idle means no ICE state, waiting on
	// the relay for traffic; activeSince is when the peer last woke.
	idle        bool
	keepaliveOn bool // a lazy peer's WireGuard keepalive (setKeepalive)
	controlling bool // we lead the pair's handshakes and ICE
	activeSince time.Time
	idleTimer   *time.Timer
	// settleTimer looks again whether a session is up, to turn a lazy
	// direct peer's keepalive on, and settleFrom is when it started
	// looking (keepaliveWhenSettled).
	settleTimer *time.Timer
	settleFrom  time.Time
	wg          wgState // in WireGuard's configuration or trimmed (trim.go)
	// keepaliveTimer turns WireGuard's keepalive on later (see addPeer);
	// set before run starts, stopped by close.
	keepaliveTimer *time.Timer

	mu          sync.Mutex // guards what Status reads
	why         string     // why relayed (why.go)
	nextAttempt time.Time  // when the next direct attempt runs, if scheduled
	kind        PathKind
	history     []PathEvent
	report      *ICEReport // nil until an attempt reports (setReport)
}

// attempt is a peer's state for its direct attempts, owned by the actor.
type attempt struct {
	agent       *ice.Agent
	attemptDone context.CancelFunc
	haveRemote  bool   // the current agent got the peer's credentials
	boundRemote uint64 // the peer's session those credentials belong to
	ufrag, pwd  string // the current agent's credentials
	localCands  []string
	ownAddrs    []netip.AddrPort // our socket's addresses, listed once per attempt (isOwnAddr)
	pending     []*Signal        // candidates that came before credentials
	failures    int
	retryTimer  *time.Timer
	checkTimer  *time.Timer // see restartWhileDirect
	offerTimer  *time.Timer // see offerAgain
	answerTimer *time.Timer // see expireUnanswered
	offers      int         // credentials sent in the current attempt
	connected   uint64      // the last session whose attempt connected
	noPair      noPairState // attempts that found no pair while nothing changed (nopair.go)
	watch       *pathWatch  // while direct (liveness.go)
}

func newPeer(env *peerEnv, info controlapi.Peer) *peer {
	ctx, cancel := context.WithCancel(context.Background())
	p := &peer{
		env:         env,
		info:        info,
		path:        env.bind.Peer(info.PublicKey),
		ctx:         ctx,
		cancel:      cancel,
		controlling: leads(env.pub, info.PublicKey),
		kind:        PathRelay,
	}
	p.ended.Add(1)
	p.box.drain = p.drain
	env.bind.Ready(p.path)
	p.epoch.Store(info.Epoch)
	p.recordEpoch.Store(info.Epoch)
	p.path.SetLeads(p.controlling)
	p.record(PathRelay, netip.AddrPort{}, "peer registered: relay until a direct path is found")
	p.post(peerEvent{begin: true})
	return p
}

// post queues an event; it never blocks the caller (a full queue means
// the peer is far behind, and the event is dropped; a closing peer drops
// every event).
func (p *peer) post(ev peerEvent) {
	if p.box.put(ev) == full {
		p.env.log.Warn("peer event queue full", "peer", p.info.Name)
	}
}

// close ends the actor: the attempt running now (if any) is cancelled,
// the events still waiting are dropped, and the end event stops its
// timers, signals and agent. It returns once that is done.
func (p *peer) close() {
	if p.keepaliveTimer != nil {
		p.keepaliveTimer.Stop()
	}
	p.cancel()
	p.box.closeWith(peerEvent{end: true})
	p.ended.Wait()
}

// drain is the actor's goroutine: it handles the waiting events, oldest
// first, and returns when none is left (the mailbox starts it again).
func (p *peer) drain() {
	for {
		evs := p.box.next()
		if evs == nil {
			return
		}
		for _, ev := range evs {
			if p.attempt == nil && !(ev.begin && p.lazy()) {
				p.attempt = &attempt{}
			}
			switch {
			case ev.end:
				p.stopTimers()
				if q := p.sigq.Load(); q != nil {
					q.wait()
				}
				p.stopAgent()
				p.ended.Done()
				return // closeWith refused every event after this one
			case p.ctx.Err() != nil:
				// closing: only the end event is left to handle
			case ev.begin:
				p.begin(p.ctx)
			case p.env.cfg.RelayOnly:
				// no direct attempts: nothing else concerns the actor
			default:
				p.handle(p.ctx, ev)
			}
		}
	}
}

// begin is the actor's first step: the first attempt, or idle until there
// is traffic (lazy), or nothing at all (relay only).
func (p *peer) begin(ctx context.Context) {
	switch {
	case p.env.cfg.RelayOnly:
		p.record(PathRelay, netip.AddrPort{}, "direct paths disabled (RelayOnly)")
		p.setWhy("direct paths are disabled on this node (relay only)", time.Time{})
	case p.lazy():
		// addPeer left the peer out of WireGuard's configuration. A
		// packet since has put it back, and WireGuard holds that packet
		// behind the handshake it opened: trimming now would drop both.
		p.idleOn(ctx, reasonIdle, false)
	default:
		p.startAttempt(ctx, "first attempt")
	}
}

// stopTimers stops the retry, check and idle timers.
func (p *peer) stopTimers() {
	for _, t := range []**time.Timer{&p.retryTimer, &p.checkTimer, &p.idleTimer, &p.offerTimer, &p.settleTimer} {
		if *t != nil {
			(*t).Stop()
			*t = nil
		}
	}
}

func (p *peer) handle(ctx context.Context, ev peerEvent) {
	switch {
	case ev.wake:
		p.onWake(ctx)
	case ev.idleCheck:
		p.onIdleCheck(ctx)
	case ev.settle:
		p.settleTimer = nil
		if _, direct := p.path.Direct(); direct && ev.session == p.connected && !p.idle {
			p.keepaliveWhenSettled(ctx)
		}
	case ev.liveness:
		p.onLiveness(ctx, ev.session)
	case ev.consent:
		p.onConsent(ctx, ev.session)
	case ev.changed, ev.reconnected:
		p.onNetworkChange(ctx, ev.reconnected)
	case ev.reoffer:
		p.offerTimer = nil
		if ev.session == p.session && p.agent != nil && !p.haveRemote {
			p.resendAll(ctx)
			p.offerAgain(ctx)
		}
	case ev.unanswered:
		if ev.session == p.session && p.agent != nil && !p.haveRemote && !p.idle {
			p.fail(ctx, fmt.Sprintf("attempt timed out after %s: the peer never answered our ICE credentials", p.env.cfg.AttemptTimeout))
		}
	case ev.local != "":
		if ev.session == p.session {
			p.localCands = append(p.localCands, ev.local)
			if err := p.send(ctx, &Signal{Kind: SignalCandidate, Candidate: ev.local}); err != nil {
				p.env.log.Debug("signal candidate", "peer", p.info.Name, "err", err)
			}
		}
	case ev.signal != nil:
		p.onSignal(ctx, ev.signal)
	case ev.connected != nil:
		if ev.session != p.session || p.idle {
			return // a stale attempt, or one goIdle cancelled
		}
		if ev.connected.err != nil {
			p.setReport(func(r *ICEReport) { r.Err = ev.connected.err.Error() })
			p.noteNoPair()
			p.fail(ctx, p.attemptFailedWhy())
			return
		}
		p.failures = 0
		p.noPair = noPairState{}
		p.connected = ev.session
		p.countOutcome(true)
		p.env.bind.SetDirect(p.path, ev.connected.addr)
		p.record(PathDirect, ev.connected.addr, "ICE nominated a pair")
		p.settleFrom = time.Time{}
		p.keepaliveWhenSettled(ctx)
		p.watchDirect(ctx, ev.connected)
		p.replayRecent()
		p.retireAgent()
	case ev.state != nil:
		if ev.session != p.session || p.idle {
			return
		}
		p.setReport(func(r *ICEReport) { r.State = ev.state.String() })
		switch *ev.state {
		case ice.ConnectionStateDisconnected, ice.ConnectionStateFailed:
			if p.quietPeer() {
				p.goIdle(ctx, reasonIdleLost)
				return
			}
			if _, direct := p.path.Direct(); direct {
				p.fail(ctx, fmt.Sprintf("direct path went silent (no answer for %s)", p.env.cfg.DeadAfter))
				if p.env.directLost != nil {
					p.env.directLost()
				}
			}
		}
	case ev.retry:
		if ev.session != p.session {
			return // an attempt started after this retry was scheduled
		}
		p.retryTimer = nil
		if p.quietPeer() {
			p.goIdle(ctx, reasonIdle)
			return
		}
		p.startAttempt(ctx, fmt.Sprintf("retry %d", p.failures))
	case ev.checkDirect:
		p.checkTimer = nil
		if ev.session != p.session || p.connected == p.session {
			return
		}
		if _, direct := p.path.Direct(); direct && p.env.now().Sub(p.path.LastDirectReceive()) >= restartCheck(p.env.cfg.DeadAfter) {
			// The attempt runs on; it returns us to a direct path if
			// it finds one.
			p.env.bind.SetDirect(p.path, netip.AddrPort{})
			p.record(PathRelay, netip.AddrPort{}, "direct path silent while the peer restarted ICE")
			p.setWhy("direct path went silent while the peer restarted ICE; its new attempt runs", time.Time{})
			if p.env.directLost != nil {
				p.env.directLost()
			}
		}
	}
}

// restartWhileDirect watches the direct path after the peer restarted
// ICE. The peer does that when its side of the path died (or it
// restarted), and our agent, which would have told us the same through
// its consent checks within moments, is gone with the old attempt: the
// new one reports only when it connects or times out (AttemptTimeout),
// and meanwhile a dead path would swallow our traffic. Over a working
// path the new attempt connects within a few hundred milliseconds. So if
// it has not connected restartCheck from now, and nothing came on the
// direct path meanwhile, the path goes to the relay; the attempt runs on
// and brings it back when it connects.
func (p *peer) restartWhileDirect(ctx context.Context) {
	if _, direct := p.path.Direct(); !direct {
		return
	}
	if p.checkTimer != nil {
		p.checkTimer.Stop()
	}
	session := p.session
	p.checkTimer = time.AfterFunc(restartCheck(p.env.cfg.DeadAfter), func() {
		if ctx.Err() == nil {
			p.post(peerEvent{checkDirect: true, session: session})
		}
	})
}

// restartCheck is how long restartWhileDirect gives a new attempt.
func restartCheck(deadAfter time.Duration) time.Duration {
	return min(deadAfter/2, 2*time.Second)
}

// countOutcome counts how the current attempt ended.
func (p *peer) countOutcome(connected bool) {
	switch {
	case p.env.ice == nil:
	case connected:
		p.env.ice.connected.Add(1)
	default:
		p.env.ice.failed.Add(1)
	}
}

// fail falls back to the relay and schedules the next direct attempt. The
// current attempt counts as failed unless it had connected (a direct path
// that went silent).
func (p *peer) fail(ctx context.Context, reason string) {
	if p.agent != nil && p.connected != p.session {
		p.countOutcome(false)
	}
	if _, direct := p.path.Direct(); direct {
		p.env.bind.SetDirect(p.path, netip.AddrPort{})
		p.record(PathRelay, netip.AddrPort{}, reason)
		p.replayRecent()
	}
	p.stopAgent()
	p.failures++
	p.setWhy(reason, p.scheduleRetry(ctx))
}

// scheduleRetry backs off exponentially with jitter between RetryMin and
// RetryMax: attempts never stop, and never come faster than RetryMin.
// It returns when the retry runs.
func (p *peer) scheduleRetry(ctx context.Context) time.Time {
	if p.retryTimer != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.nextAttempt
	}
	d := float64(p.env.cfg.RetryMin) * math.Pow(2, float64(min(p.failures-1, 10)))
	d = min(d, float64(p.retryMax()))
	d = d/2 + mrand.Float64()*d/2 //nolint:gosec // jitter, not a secret
	session := p.session
	p.retryTimer = time.AfterFunc(time.Duration(d), func() {
		if ctx.Err() == nil {
			p.post(peerEvent{retry: true, session: session})
		}
	})
	return p.env.now().Add(time.Duration(d))
}

// cancelRetry drops a scheduled retry; one already queued is told apart
// by its session (handle ignores it once a new attempt has begun).
func (p *peer) cancelRetry() {
	if p.retryTimer != nil {
		p.retryTimer.Stop()
		p.retryTimer = nil
	}
}
