package node

// The peer actor's side of signaling: sealing, answering and adopting
// the peer's signals (see peer.go for the actor).

import (
	"context"
	"net/netip"

	"github.com/latticelab/lattice/key"
)

// send queues s under the current session for control, which numbers
// and seals it as it leaves; it does not wait for control's answer.
func (p *peer) send(ctx context.Context, s *Signal) error {
	s.Session = p.session
	s.PeerEpoch = p.epoch.Load()
	if p.env.epoch != nil {
		s.Epoch = p.env.epoch()
	}
	return p.queue().push(ctx, s)
}

// queue is the peer's signal queue (signal_queue.go), made on first use.
// Safe for any goroutine.
func (p *peer) queue() *signalQueue {
	if q := p.sigq.Load(); q != nil {
		return q
	}
	q := &signalQueue{
		send: func(ctx context.Context, b []byte) error { return p.env.signal(ctx, p.info.NodeID, b) },
		seal: func(s *Signal) ([]byte, error) {
			s.Time = p.env.now().UnixMilli()
			return SealSignalShared(p.sharedKey(), s)
		},
		log: p.env.log.With("peer", p.info.Name),
	}
	if !p.sigq.CompareAndSwap(nil, q) {
		return p.sigq.Load()
	}
	return q
}

// sharedKey is the box key shared with the peer. One X25519 per peer
// rather than one per signal: it was a tenth of a busy mesh's CPU.
// Safe for any goroutine.
func (p *peer) sharedKey() *key.Shared {
	if k := p.shared.Load(); k != nil {
		return k
	}
	k := p.env.priv.Shared(p.info.PublicKey)
	if !p.shared.CompareAndSwap(nil, &k) {
		return p.shared.Load() // another goroutine's, the same key
	}
	return &k
}

func (p *peer) onSignal(ctx context.Context, s *Signal) {
	if err := p.remote.admit(s, p.env.now()); err != nil {
		p.env.log.Debug("signal refused", "peer", p.info.Name, "err", err)
		return
	}
	switch s.Kind {
	case SignalCredentials:
		if p.idle {
			// The peer has traffic for us: run the attempt with it.
			p.leaveIdle(ctx)
		}
		if p.haveRemote && s.Session == p.boundRemote {
			// The same credentials again: the peer has not heard ours.
			p.resendIfLost(ctx, s)
			return
		}
		if p.agent != nil && p.haveRemote && s.PeerSession == p.session && p.connected != p.session {
			p.adopt(ctx, s)
			return
		}
		if p.agent == nil || p.haveRemote {
			// The peer restarted ICE (or we were between attempts):
			// start afresh so both sides run the same attempt.
			p.startAttempt(ctx, "peer restarted ICE")
			if p.agent == nil {
				return
			}
			p.restartWhileDirect(ctx)
		}
		p.haveRemote = true
		p.boundRemote = s.Session
		p.setReport(func(r *ICEReport) { r.RemoteCandidates, r.SelfCandidates = nil, nil })
		p.connect(ctx, s.Ufrag, s.Pwd)
		for _, c := range p.pending {
			if c.Session == s.Session {
				p.addRemote(c)
			}
		}
		p.pending = nil
		p.resendIfLost(ctx, s)
	case SignalCandidate:
		if !p.haveRemote {
			p.pending = append(p.pending, s)
			return
		}
		p.addRemote(s)
	}
}

// adopt binds the running attempt to the peer's new session s instead of
// restarting ours. s names our current session, so the peer's new agent
// already has (or, being a fresh retry, is about to get) our credentials:
// restarting here would send new ones that make the peer restart in turn,
// and two attempts answering each other's restarts never settle (a long
// link flap ended that way, each restart cancelling the other's before it
// could connect). If the switch leaves the attempt unable to connect, it
// times out and the backoff starts a fresh one.
func (p *peer) adopt(ctx context.Context, s *Signal) {
	if err := p.agent.SetRemoteCredentials(s.Ufrag, s.Pwd); err != nil {
		p.env.log.Debug("adopt peer session", "peer", p.info.Name, "err", err)
		p.fail(ctx, "ICE attempt could not take the peer's new session: "+err.Error())
		return
	}
	p.env.log.Debug("ICE attempt adopts the peer's session", "peer", p.info.Name, "session", p.session, "peer_session", s.Session)
	p.boundRemote = s.Session
	p.setReport(func(r *ICEReport) { r.RemoteCandidates, r.SelfCandidates = nil, nil })
	p.restartWhileDirect(ctx)
	for _, c := range p.pending {
		if c.Session == s.Session {
			p.addRemote(c)
		}
	}
	p.pending = nil
	// A fresh retry of the peer's heard of our session but does not have
	// our credentials; one that answered ours ignores the repeat.
	p.resendAll(ctx)
}

// sendCredentials signals the current agent's credentials, naming the
// peer session we have heard of.
func (p *peer) sendCredentials(ctx context.Context) error {
	return p.send(ctx, &Signal{Kind: SignalCredentials, Ufrag: p.ufrag, Pwd: p.pwd, PeerSession: p.remote.current()})
}

// resendIfLost sends our credentials and candidates again when the peer's
// credentials show it never got them (it signaled before we subscribed,
// or a message was lost).
func (p *peer) resendIfLost(ctx context.Context, s *Signal) {
	if s.PeerSession == p.session || p.agent == nil {
		return
	}
	p.resendAll(ctx)
}

// resendAll sends our credentials and every candidate of the current
// attempt again.
func (p *peer) resendAll(ctx context.Context) {
	if err := p.sendCredentials(ctx); err != nil {
		p.env.log.Debug("resend credentials", "peer", p.info.Name, "err", err)
		return
	}
	for _, c := range p.localCands {
		if err := p.send(ctx, &Signal{Kind: SignalCandidate, Candidate: c}); err != nil {
			p.env.log.Debug("resend candidate", "peer", p.info.Name, "err", err)
			return
		}
	}
}

func (p *peer) record(kind PathKind, addr netip.AddrPort, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kind = kind
	ev := PathEvent{Time: p.env.now(), To: kind, Addr: addr, Reason: reason}
	p.history = append(p.history, ev)
	if p.env.switched != nil {
		p.env.switched(ev)
	}
	if len(p.history) > maxHistory {
		p.history = p.history[len(p.history)-maxHistory:]
	}
	p.env.log.Info("path", "peer", p.info.Name, "to", kind, "addr", addr, "reason", reason)
}

// iceReport is the last attempt's report (the zero one before any).
func (p *peer) iceReport() ICEReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.report == nil {
		return ICEReport{}
	}
	return *p.report
}

func (p *peer) setReport(f func(*ICEReport)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.report {
	case nil:
		p.report = &ICEReport{}
	case &idleReport:
		r := idleReport
		p.report = &r
	}
	f(p.report)
}
