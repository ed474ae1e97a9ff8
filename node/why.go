package node

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
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
	r := p.iceReport()
	base := fmt.Sprintf("attempt timed out after %s", p.env.cfg.AttemptTimeout)
	local, remote := candidateFamilies(r.LocalCandidates), candidateFamilies(r.RemoteCandidates)
	stun := addrFamilies(append(slices.Clone(p.env.cfg.STUN), p.stunServers()...))
	switch {
	case len(r.RemoteCandidates) == 0:
		return base + ": the peer sent no candidates"
	case local.any() && !local.meets(remote):
		return fmt.Sprintf("%s: no address family in common (%s here, %s at the peer), and ICE pairs only within one", base, local, remote)
	case !hasSrflx(r.LocalCandidates) && stun.any() && !local.meets(stun):
		return fmt.Sprintf("%s: no STUN server of this host's family (%s here, the STUN servers %s), so no public address to offer", base, local, stun)
	case !hasSrflx(r.LocalCandidates) && len(p.env.cfg.STUN)+len(p.stunServers()) > 0:
		return base + ": UDP from here looks blocked (no STUN answer)"
	case !hasSrflx(r.RemoteCandidates):
		return base + ": UDP to the peer looks blocked (it had no STUN answer)"
	default:
		return base + ": no candidate pair answered; a NAT on the way filters by address and port, or maps per destination (symmetric)"
	}
}

// candidateFamilies are the address families of candidates as pion
// writes them ("udp4 host 192.0.2.1:51820", "udp6 srflx [2001:db8::1]:…").
func candidateFamilies(cands []string) families {
	var f families
	for _, c := range cands {
		f.v4 = f.v4 || strings.HasPrefix(c, "udp4 ")
		f.v6 = f.v6 || strings.HasPrefix(c, "udp6 ")
	}
	return f
}

// addrFamilies are the families of host:port addresses; a name counts as
// both (its resolver decides).
func addrFamilies(addrs []string) families {
	var f families
	for _, a := range addrs {
		ap, err := netip.ParseAddrPort(a)
		switch {
		case err != nil:
			f.v4, f.v6 = true, true
		case ap.Addr().Unmap().Is4():
			f.v4 = true
		default:
			f.v6 = true
		}
	}
	return f
}

func (f families) any() bool { return f.v4 || f.v6 }

// meets reports whether f and g share a family.
func (f families) meets(g families) bool { return f.v4 && g.v4 || f.v6 && g.v6 }

func (f families) String() string {
	switch {
	case f.v4 && f.v6:
		return "IPv4 and IPv6"
	case f.v4:
		return "IPv4 only"
	case f.v6:
		return "IPv6 only"
	}
	return "no address"
}

// stunServers is how many STUN servers the agents use (from control).
func (p *peer) stunServers() []string { return p.env.stun }
