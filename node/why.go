package node

import (
	"fmt"
	"time"
)

// Why a peer is relayed, in words (issue 22.6): PeerStatus.Why. The
// peer's actor sets the cause (setWhy) where it decides; status adds the
// countdown to the next attempt. Library errors never reach it: an ICE
// attempt that failed is told by what it saw (its candidates), not by
// pion's error string, which stays in ICEReport.Err for debugging.

// setWhy sets why the peer is on the relay and when the next direct
// attempt runs (zero: none scheduled).
func (p *peer) setWhy(why string, next time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.why, p.nextAttempt = why, next
}

// whyLocked is PeerStatus.Why at now; callers hold p.mu.
func (p *peer) whyLocked(now time.Time) string {
	if p.kind != PathRelay {
		return ""
	}
	if p.nextAttempt.IsZero() {
		return p.why
	}
	if d := p.nextAttempt.Sub(now); d > 0 {
		return fmt.Sprintf("%s, next in %s", p.why, d.Round(time.Second))
	}
	return p.why + ", retrying now"
}

// attemptFailedWhy explains an ICE attempt that found no pair, from the
// candidates both sides had.
func (p *peer) attemptFailedWhy() string {
	p.mu.Lock()
	r := p.report
	p.mu.Unlock()
	base := fmt.Sprintf("attempt timed out after %s", p.env.cfg.AttemptTimeout)
	switch {
	case len(r.RemoteCandidates) == 0:
		return base + ": the peer sent no candidates"
	case !hasSrflx(r.LocalCandidates) && len(p.env.cfg.STUN)+len(p.stunServers()) > 0:
		return base + ": UDP from here looks blocked (no STUN answer)"
	case !hasSrflx(r.RemoteCandidates):
		return base + ": UDP to the peer looks blocked (it had no STUN answer)"
	default:
		return base + ": no candidate pair answered; a NAT on the way filters by address and port, or maps per destination (symmetric)"
	}
}

// stunServers is how many STUN servers the agents use (from control).
func (p *peer) stunServers() []string { return p.env.stun }
