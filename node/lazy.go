package node

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// Lazy connections (ICEConfig.Lazy). Every peer is reachable at once
// through the relay; the direct path is negotiated only while traffic
// flows to or from the peer, so an idle peer costs no ICE agent, no STUN,
// no consent checks and no timers of its own. Traffic here is WireGuard
// data: transport messages with a payload. Keepalives (an empty transport
// message) and handshakes do not count, or WireGuard's own 25 s
// keepalives and 2 min rekeys would keep every peer awake.
//
//   - An idle peer's Path holds a wake function. The Bind calls it (once)
//     on the first data packet either way; the peer then starts an ICE
//     attempt. The packet itself goes through the relay meanwhile, as every
//     packet of an idle peer does, so it is never dropped or held.
//   - The other side starts its agent when our credentials arrive (an ICE
//     restart, as before), whether it has seen traffic or not.
//   - While awake, one timer per peer fires IdleTimeout after the last
//     data packet; then the agent is closed and the peer is idle again.
//     The other side's agent sees its consent checks go unanswered; a lazy
//     peer that has seen no traffic for IdleTimeout takes that as the
//     peer going idle, not as a failed path.
//   - Retries after a failed attempt run only while the peer is active.
//   - Peers named in AlwaysDirect are never lazy.

// defaultIdleTimeout is ICEConfig.IdleTimeout's default.
const defaultIdleTimeout = 5 * time.Minute

// Reasons a lazy peer is on the relay, as status shows them.
const (
	reasonIdle     = "idle (lazy): direct path negotiated on first traffic"
	reasonIdleLost = "idle (lazy): the peer closed the direct path after no traffic; negotiated again on first traffic"
)

// isData reports whether a WireGuard packet carries data: a transport
// message longer than an empty one (a keepalive).
func isData(pkt []byte) bool { return isTransport(pkt) && len(pkt) > transportMin }

// lazyState is the part of a Path lazy connections use; the Bind writes
// it on every data packet.
type lazyState struct {
	lastData atomic.Int64           // Unix ns of the last data packet, either way
	wake     atomic.Pointer[func()] // set while idle; the next data packet takes and calls it
}

// noteData records a data packet at now and wakes an idle peer.
func (p *Path) noteData(now int64) {
	p.lastData.Store(now)
	p.wakeIdle()
}

// wakeIdle wakes an idle peer. The Bind also calls it for a handshake
// initiation WireGuard sends: an idle peer has no keepalive, so WireGuard
// opens a handshake to it only for data queued behind it. Waiting for
// that data would wait for the handshake, which the relay alone must
// carry, and cannot when the relay is out of reach (a link that drops
// the relay's large TCP segments, a relay outage): the direct attempt
// starts at once instead.
func (p *Path) wakeIdle() {
	if w := p.wake.Load(); w != nil && p.wake.CompareAndSwap(w, nil) {
		(*w)()
	}
}

// LastData is when the last WireGuard data packet went to or came from
// the peer (zero: none yet).
func (p *Path) LastData() time.Time {
	if ns := p.lastData.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// lazy reports whether this peer's direct path waits for traffic.
func (p *peer) lazy() bool {
	return p.env.cfg.Lazy && !p.env.cfg.alwaysDirect(p.info)
}

// quietFor is how long no data has gone either way since the peer last
// woke (or appeared).
func (p *peer) quietFor() time.Duration {
	last := p.activeSince
	if d := p.path.LastData(); d.After(last) {
		last = d
	}
	return p.env.now().Sub(last)
}

// goIdle closes the peer's ICE state and waits on the relay for traffic.
// idleReport is every idle peer's ICE report: most of a large lazy mesh
// is idle, and a report each was 136 bytes a peer. Never written.
var idleReport = ICEReport{State: "idle"}

func (p *peer) goIdle(ctx context.Context, reason string) { p.idleOn(ctx, reason, true) }

// idleOn is goIdle; trim false leaves WireGuard's configuration as it is.
func (p *peer) idleOn(ctx context.Context, reason string, trim bool) {
	since := time.Now().UnixNano() // the decision; data or a handshake after it is traffic
	if p.attempt != nil {
		p.stopAgent()
		p.stopTimers()
		p.attempt = nil // drain makes a new one for the next event
	}
	p.idle = true
	p.setKeepalive(false)
	busy := false
	if trim && p.env.trim != nil {
		busy = !p.env.trim(p, since)
	}
	p.env.bind.SetDirect(p.path, netip.AddrPort{})
	p.record(PathRelay, netip.AddrPort{}, reason)
	p.setWhy(reason, time.Time{})
	p.mu.Lock()
	p.report = &idleReport // shared: setReport copies it before a change
	p.mu.Unlock()
	wake := func() {
		if ctx.Err() == nil {
			p.post(peerEvent{wake: true})
		}
	}
	p.path.wake.Store(&wake)
	if busy || p.path.lastData.Load() > since {
		// Traffic came while we were closing: wake at once.
		p.path.wakeIdle()
	}
}

// leaveIdle makes an idle peer active: it is about to run an attempt.
func (p *peer) leaveIdle(ctx context.Context) {
	p.path.wake.Store(nil)
	p.idle = false
	p.activeSince = p.env.now()
	p.armIdle(ctx, p.env.cfg.IdleTimeout)
}

// armIdle checks for idleness after d.
func (p *peer) armIdle(ctx context.Context, d time.Duration) {
	if p.idleTimer != nil {
		p.idleTimer.Stop()
	}
	p.idleTimer = time.AfterFunc(d, func() {
		if ctx.Err() == nil {
			p.post(peerEvent{idleCheck: true})
		}
	})
}

// onIdleCheck closes the direct path of a peer quiet for IdleTimeout, or
// looks again when it would be.
func (p *peer) onIdleCheck(ctx context.Context) {
	p.idleTimer = nil
	if p.idle || !p.lazy() {
		return
	}
	quiet := p.quietFor()
	if quiet < p.env.cfg.IdleTimeout {
		p.armIdle(ctx, p.env.cfg.IdleTimeout-quiet)
		return
	}
	p.goIdle(ctx, fmt.Sprintf("idle (lazy): no traffic for %s; direct path negotiated on next traffic", p.env.cfg.IdleTimeout))
}

// onWake starts a direct attempt for an idle peer that has traffic.
func (p *peer) onWake(ctx context.Context) {
	if !p.idle {
		return
	}
	p.leaveIdle(ctx)
	p.startAttempt(ctx, "traffic to or from the peer (lazy)")
}

// quietPeer reports whether a lazy peer has been quiet long enough that
// the peer's side has gone idle: its silence is not a failed path.
func (p *peer) quietPeer() bool {
	return p.lazy() && p.quietFor() >= p.env.cfg.IdleTimeout
}

// setKeepalive turns a lazy peer's WireGuard keepalive on (its direct
// path must keep its NAT mappings) or off (idle on the relay, whose own
// connection is kept alive: nothing per peer is needed). Eager peers keep
// theirs as addPeer set it.
func (p *peer) setKeepalive(on bool) {
	if p.lazy() && p.env.keepalive != nil && p.keepaliveOn != on {
		p.keepaliveOn = on
		p.env.keepalive(p.info.PublicKey, on)
	}
}

// keepaliveWhenSettled turns a lazy peer's keepalive on now that it is
// direct, once a WireGuard session with it is up and no handshake is
// under way. wireguard-go sends a keepalive the moment it is turned on,
// and with no session that opens a handshake of its own. On the side
// answering the peer's initiation (the usual case: the peer's first packet
// woke us, and ICE on a LAN can finish before the handshake through the
// relay), that second initiation races wireguard-go's handling of the
// first: its handshake workers and the configuration share one handshake
// state per peer, and the two sides can end with sessions whose keys and
// indices do not match. The peer's data is then dropped until its timers
// start over, 15 s later: a ping unanswered for 10 s in about one
// 100-node lab run in six. It looks again every settleCheck, and after
// handshakeSettle turns the keepalive on regardless (a handshake that
// opens then has nothing left to race).
func (p *peer) keepaliveWhenSettled(ctx context.Context) {
	if !p.lazy() || p.keepaliveOn {
		return
	}
	now := time.Now()
	if p.settleFrom.IsZero() {
		p.settleFrom = now
	}
	if !p.path.sessionSettled() && now.Sub(p.settleFrom) < handshakeSettle {
		session := p.connected
		p.settleTimer = time.AfterFunc(settleCheck, func() {
			if ctx.Err() == nil {
				p.post(peerEvent{settle: true, session: session})
			}
		})
		return
	}
	p.settleFrom = time.Time{}
	p.setKeepalive(true)
}

// settleCheck is how often keepaliveWhenSettled looks again.
const settleCheck = 50 * time.Millisecond

// lazyPeer reports whether info's direct path waits for traffic.
func (n *Node) lazyPeer(info controlapi.Peer) bool {
	return n.cfg.ICE.Lazy && !n.cfg.ICE.alwaysDirect(info)
}

// setKeepalive sets WireGuard's persistent keepalive to pk on or off.
func (n *Node) setKeepalive(pk key.Public, on bool) {
	secs := 0
	if on {
		secs = persistentKeepalive
	}
	if err := n.dev.IpcSet(fmt.Sprintf("public_key=%s\nupdate_only=true\npersistent_keepalive_interval=%d\n", pk.Hex(), secs)); err != nil {
		n.log.Debug("WireGuard keepalive", "peer", pk.ShortString(), "on", on, "err", err)
	}
}
