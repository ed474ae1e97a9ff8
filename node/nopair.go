package node

import (
	"context"
	"hash/fnv"
	"slices"
	"strings"
	"time"
)

// Pairs that can never go direct. Two NATs that cannot meet (a symmetric
// NAT against one that filters by address and port) fail every attempt
// the same way: both sides gather server-reflexive candidates and no
// pair answers. Retrying every RetryMax for ever cost about a fifth of a
// 20-node lab's CPU (each attempt is two ICE agents sending checks every
// 50 ms for AttemptTimeout). So once noPairAfter attempts in a row have
// failed so with the same candidates on both sides, the backoff may grow
// to RetryNoPair; what could make a pair work again retries it at once:
//   - the peer's new attempt (new candidates: it moved, its NAT rebooted)
//     is answered as always (peer_signal.go);
//   - our own network changing under us shows as a direct path lost or
//     an uplink probe failing (probe.go), and the node then tells every
//     peer (onNetworkChange);
//   - control reachable again after an outage (session.go's resync) retries
//     every peer waiting on a backoff, whatever its failures were.

// noPairAfter is how many attempts in a row must fail with no pair and
// the same candidates before the backoff grows past RetryMax.
const noPairAfter = 3

// noPairState counts attempts that found no pair while nothing changed.
type noPairState struct {
	n     int    // attempts in a row
	print uint64 // both sides' candidates in the last one
}

// noteNoPair records a failed attempt: another with no pair and the same
// candidates as the last, or something else (which starts over).
func (p *peer) noteNoPair() {
	r := p.iceReport()
	if !hasSrflx(r.LocalCandidates) || !hasSrflx(r.RemoteCandidates) {
		// No STUN answer on one side: UDP blocked, which a firewall may
		// lift at any time; the ordinary backoff applies.
		p.noPair = noPairState{}
		return
	}
	print := candidatePrint(r.LocalCandidates, r.RemoteCandidates)
	if p.noPair.n > 0 && print != p.noPair.print {
		p.noPair.n = 0
	}
	p.noPair.n++
	p.noPair.print = print
}

// retryMax is the longest backoff for the next attempt.
func (p *peer) retryMax() time.Duration {
	if p.noPair.n >= noPairAfter {
		return p.env.cfg.RetryNoPair
	}
	return p.env.cfg.RetryMax
}

// onNetworkChange retries at once a peer that the long backoff holds, or
// after control came back (our uplink was down: the attempts that failed
// meanwhile say nothing about the pair), any peer waiting for a retry.
func (p *peer) onNetworkChange(ctx context.Context, reconnected bool) {
	if p.retryTimer == nil || p.agent != nil || p.idle || (!reconnected && p.noPair.n < noPairAfter) {
		return
	}
	p.noPair = noPairState{}
	p.failures = 0
	if reconnected {
		// Control is back: both sides can signal again, now.
		p.startAttempt(ctx, "control reachable again")
		return
	}
	p.cancelRetry()
	p.setWhy("the network changed: trying a direct path again", p.scheduleRetry(ctx))
}

// candidatePrint fingerprints both sides' candidates, in any order.
func candidatePrint(local, remote []string) uint64 {
	h := fnv.New64a()
	for _, side := range [][]string{local, remote} {
		s := slices.Clone(side)
		slices.Sort(s)
		for _, c := range s {
			_, _ = h.Write([]byte(c))
			_, _ = h.Write([]byte{0})
		}
		_, _ = h.Write([]byte{1})
	}
	return h.Sum64()
}

// hasSrflx reports whether a candidate list (ICEReport's strings) holds a
// server-reflexive one.
func hasSrflx(cands []string) bool {
	return slices.ContainsFunc(cands, func(c string) bool { return strings.Contains(c, " srflx ") })
}
