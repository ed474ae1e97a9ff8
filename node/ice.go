package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/stun/v4"
	"github.com/pion/transport/v5"

	"github.com/latticelab/lattice/control/controlapi"
)

// ICEConfig tunes ICE and path selection. Its zero value works.
type ICEConfig struct {
	// STUN servers for server-reflexive candidates ("host:port").
	STUN []string
	// DeadAfter is how long an idle direct path may be silent (no ICE
	// consent, no WireGuard) before the peer falls back to the relay. If
	// zero, 20s. Consent checks run every min(5s, DeadAfter/4) (RFC 7675;
	// ±20% above 2 s, where the node sends them rather than pion). A path
	// carrying traffic is watched harder and falls back within about a
	// second (liveness.go).
	DeadAfter time.Duration
	// RetryMin and RetryMax bound the backoff between direct attempts.
	// If zero, 2s and 60s.
	RetryMin, RetryMax time.Duration
	// RetryNoPair bounds the backoff once attempts keep failing with no
	// candidate pair answering while neither side's candidates change
	// (NATs that can never meet directly). If zero, 15 minutes, or
	// RetryMax if that is longer. A direct path lost or an uplink failing
	// a probe (a NAT reboot, a network change) retries such peers at once,
	// and the peer's own new attempt is always answered.
	RetryNoPair time.Duration `json:",omitempty"`
	// AttemptTimeout bounds one ICE attempt. If zero, 10s.
	AttemptTimeout time.Duration
	// Candidates filters the addresses host candidates may use. If nil,
	// every address but loopback.
	Candidates func(netip.Addr) bool `json:"-"` // a Go value: configuration files cannot carry it
	// RelayOnly never tries a direct path (for measurements and networks
	// where direct paths are unwanted).
	RelayOnly bool
	// Lazy negotiates a peer's direct path only while traffic flows to
	// or from it; until then, and once it has been idle for IdleTimeout,
	// the peer is reached through the relay and costs no ICE agent (see
	// lazy.go). Both sides of a pair should agree: a lazy peer also starts
	// an attempt when the other side offers one.
	Lazy bool `json:",omitempty"`
	// IdleTimeout is how long a lazy peer may go without WireGuard data
	// (keepalives and handshakes do not count) before its direct path is
	// closed. If zero, 5 minutes.
	IdleTimeout time.Duration `json:",omitempty"`
	// AlwaysDirect names peers that are never lazy: their direct path is
	// negotiated from the start, as without Lazy (routers, servers). An
	// entry is a node name, or "tag:" and a tag that the peer's join
	// token gave it (always.go).
	AlwaysDirect []string `json:",omitempty"`
}

func (c *ICEConfig) defaults() {
	if c.DeadAfter == 0 {
		c.DeadAfter = defaultDeadAfter
	}
	if c.RetryMin == 0 {
		c.RetryMin = 2 * time.Second
	}
	if c.RetryMax == 0 {
		c.RetryMax = 60 * time.Second
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = 10 * time.Second
	}
	if c.RetryNoPair == 0 {
		c.RetryNoPair = 15 * time.Minute
	}
	c.RetryNoPair = max(c.RetryNoPair, c.RetryMax)
	if c.IdleTimeout == 0 {
		c.IdleTimeout = defaultIdleTimeout
	}
}

type iceResult struct {
	addr   netip.AddrPort
	remote ice.Candidate // the selected pair's remote end
	err    error
}

// startAttempt creates a new ICE agent under a new session and sends our
// credentials to the peer.
func (p *peer) startAttempt(ctx context.Context, why string) {
	p.stopAgent()
	// This attempt supersedes a scheduled retry: left to fire, the retry
	// would tear this attempt down moments into its checks (a peer that
	// restarted ICE, then its own retry timer, restarted twice, and the
	// two sides could chase each other's sessions until AttemptTimeout).
	p.cancelRetry()
	var b [8]byte
	_, _ = rand.Read(b[:])
	// Sessions only grow, so the peer can tell a restart from a replay.
	p.session = max(p.session+1, uint64(p.env.now().UnixMilli())<<16|uint64(binary.BigEndian.Uint16(b[:2])))
	p.queue().session.Store(p.session)
	session := p.session
	agent, err := ice.NewAgentWithOptions(p.env.agentOpt...)
	if err != nil {
		p.env.log.Warn("ICE agent", "peer", p.info.Name, "err", err)
		p.failures++
		p.setWhy("could not start a direct attempt", p.scheduleRetry(ctx))
		return
	}
	p.agent = agent
	if p.env.ice != nil {
		p.env.ice.attempts.Add(1)
	}
	p.setReport(func(r *ICEReport) { *r = ICEReport{Session: session, State: "new"} })
	_ = agent.OnCandidate(func(c ice.Candidate) {
		if c == nil {
			return
		}
		p.setReport(func(r *ICEReport) { r.LocalCandidates = append(r.LocalCandidates, c.String()) })
		p.post(peerEvent{local: c.Marshal(), session: session})
	})
	_ = agent.OnConnectionStateChange(func(s ice.ConnectionState) {
		p.post(peerEvent{state: &s, session: session})
	})
	ufrag, pwd, err := agent.GetLocalUserCredentials()
	p.ufrag, p.pwd = ufrag, pwd
	if err == nil {
		err = p.sendCredentials(ctx)
	}
	if err == nil {
		err = agent.GatherCandidates()
	}
	if err != nil {
		p.env.log.Debug("ICE attempt", "peer", p.info.Name, "err", err)
		p.failures++
		p.countOutcome(false)
		p.stopAgent()
		p.setWhy("could not start a direct attempt (signaling or gathering failed)", p.scheduleRetry(ctx))
		return
	}
	p.offers = 0
	p.offerAgain(ctx)
	p.expireUnanswered(ctx)
	p.setWhy("negotiating a direct path", time.Time{})
	p.env.log.Debug("ICE attempt", "peer", p.info.Name, "session", session, "why", why, "controlling", p.controlling)
}

// offerAgain sends our credentials again if the peer has not answered
// them within 1 s, then 2 s, then 4 s. A signal sent before the peer
// subscribed (it registered moments after us) is lost, and a lazy peer,
// which sends nothing until it has traffic, would not prompt a resend as
// its own credentials do (resendIfLost): the attempt would wait out
// AttemptTimeout and a retry.
func (p *peer) offerAgain(ctx context.Context) {
	if p.offerTimer != nil {
		p.offerTimer.Stop()
		p.offerTimer = nil
	}
	if p.offers >= 3 {
		return
	}
	d := time.Second << p.offers
	p.offers++
	session := p.session
	p.offerTimer = time.AfterFunc(d, func() {
		if ctx.Err() == nil {
			p.post(peerEvent{reoffer: true, session: session})
		}
	})
}

// expireUnanswered ends the attempt at AttemptTimeout if the peer's
// credentials have not come by then. connect bounds an attempt that has
// them; one that never got them (our offers lost, or refused by the
// peer) otherwise waited, with no retry scheduled, until the peer
// happened to restart: a path cut and restored stayed relayed for good.
func (p *peer) expireUnanswered(ctx context.Context) {
	session := p.session
	p.answerTimer = time.AfterFunc(p.env.cfg.AttemptTimeout, func() {
		if ctx.Err() == nil {
			p.post(peerEvent{unanswered: true, session: session})
		}
	})
}

func (p *peer) stopAgent() {
	p.stopWatch()
	for _, t := range []**time.Timer{&p.offerTimer, &p.answerTimer} {
		if *t != nil {
			(*t).Stop()
			*t = nil
		}
	}
	if p.attemptDone != nil {
		p.attemptDone()
		p.attemptDone = nil
	}
	if p.agent != nil {
		_ = p.agent.Close()
		p.agent = nil
	}
	p.haveRemote = false
	p.boundRemote = 0
	p.localCands = nil
	p.ownAddrs = nil
	p.pending = nil
}

// connect runs Dial or Accept in the background and posts the outcome.
func (p *peer) connect(ctx context.Context, ufrag, pwd string) {
	agent, session := p.agent, p.session
	actx, cancel := context.WithTimeout(ctx, p.env.cfg.AttemptTimeout)
	p.attemptDone = cancel
	go func() {
		defer cancel()
		var err error
		if p.controlling {
			_, err = agent.Dial(actx, ufrag, pwd)
		} else {
			_, err = agent.Accept(actx, ufrag, pwd)
		}
		res := &iceResult{err: err}
		if err == nil {
			pair, perr := agent.GetSelectedCandidatePair()
			if perr != nil || pair == nil {
				res.err = fmt.Errorf("connected without a selected pair: %w", perr)
			} else {
				ip, perr := netip.ParseAddr(pair.Remote.Address())
				if perr != nil {
					res.err = fmt.Errorf("selected pair address %q: %w", pair.Remote.Address(), perr)
				} else {
					res.addr = netip.AddrPortFrom(ip.Unmap(), uint16(pair.Remote.Port()))
					res.remote = pair.Remote
				}
			}
		}
		if err != nil {
			p.reportPairs(agent)
		}
		if ctx.Err() == nil {
			p.post(peerEvent{connected: res, session: session})
		}
	}()
}

func (p *peer) addRemote(s *Signal) {
	c, err := ice.UnmarshalCandidate(s.Candidate)
	if err != nil {
		p.env.log.Debug("bad remote candidate", "peer", p.info.Name, "err", err)
		return
	}
	// A candidate signaled again (a resent offer) is listed once.
	cs := c.String()
	p.setReport(func(r *ICEReport) { r.RemoteCandidates = appendNew(r.RemoteCandidates, cs) })
	if c.Type() == ice.CandidateTypeHost && p.isOwnAddr(c.Address(), c.Port()) {
		// Our own address: pion would send its checks to us and, because
		// its UDPMux routes by source address, hand our own checks to
		// this agent as wrong-username requests.
		p.setReport(func(r *ICEReport) { r.SelfCandidates = appendNew(r.SelfCandidates, cs) })
		return
	}
	if p.agent == nil {
		return // retired: the path is settled (liveness.go)
	}
	if err := p.agent.AddRemoteCandidate(c); err != nil {
		p.env.log.Debug("add remote candidate", "peer", p.info.Name, "err", err)
	}
}

// appendNew appends s to list unless list has it.
func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// isOwnAddr reports whether host:port is one of the addresses our shared
// socket listens on. It lists them once per attempt (listing a kernel's
// interfaces is a few syscalls).
func (p *peer) isOwnAddr(host string, port int) bool {
	a, err := netip.ParseAddr(host)
	if err != nil || p.env.udpMux == nil {
		return false
	}
	if p.ownAddrs == nil {
		p.ownAddrs = []netip.AddrPort{}
		for _, la := range p.env.udpMux.GetListenAddresses() {
			if ua, ok := la.(*net.UDPAddr); ok {
				ap := ua.AddrPort()
				p.ownAddrs = append(p.ownAddrs, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
			}
		}
	}
	return slices.Contains(p.ownAddrs, netip.AddrPortFrom(a.Unmap(), uint16(port)))
}

func (p *peer) reportPairs(agent *ice.Agent) {
	stats := agent.GetCandidatePairsStats()
	var pairs []string
	for _, s := range stats {
		pairs = append(pairs, fmt.Sprintf("%s ↔ %s: %s", s.LocalCandidateID, s.RemoteCandidateID, s.State))
	}
	p.setReport(func(r *ICEReport) { r.Pairs = pairs })
}

// agentOptions are the options of every peer's ICE agent: pn is the
// Network as ICE sees it, resp names the STUN servers and the overlay
// address.
func (n *Node) agentOptions(pn transport.Net, resp *controlapi.RegisterResponse) ([]ice.AgentOption, error) {
	var urls []*stun.URI
	for _, s := range resp.STUN {
		u, err := stun.ParseURI("stun:" + s)
		if err != nil {
			return nil, fmt.Errorf("node: STUN server %q: %w", s, err)
		}
		urls = append(urls, u)
	}
	cfg := n.cfg.ICE
	// Consent on the selected pair: pion's while its interval is within
	// pion's tick (2 s), the node's beyond (consent.go, liveness.go), with
	// the agent's keepalives off and no disconnected or failed state of
	// its own. An idle path is dead once DeadAfter passes without an
	// answer: at least three checks must go missing, or a response a
	// moment late (a busy machine) drops a working path.
	keepalive, disconnected, failed := time.Duration(0), time.Duration(0), time.Duration(0)
	if pionConsent(cfg.DeadAfter) {
		keepalive = consentInterval(cfg.DeadAfter)
		disconnected, failed = cfg.DeadAfter-keepalive, 2*cfg.DeadAfter
	}
	opts := []ice.AgentOption{
		ice.WithNet(pn),
		ice.WithUDPMux(n.udpMux), ice.WithUDPMuxSrflx(newSharedSrflx(n.udpMux)),
		ice.WithUrls(urls),
		ice.WithNetworkTypes(n.networkTypes),
		ice.WithCandidateTypes([]ice.CandidateType{ice.CandidateTypeHost, ice.CandidateTypeServerReflexive}),
		ice.WithMulticastDNSMode(ice.MulticastDNSModeDisabled),
		// The controlling agent answers the peer's first check that
		// gets through a filtering NAT but checks back only at its next
		// tick; at 50 ms that tick cost a new pair up to 50 ms.
		ice.WithCheckInterval(20 * time.Millisecond),
		// pion waits 500ms (1s) before accepting a server- (peer-)
		// reflexive pair in case a better one comes; there is no
		// better one here (no TURN), and the relay already carries
		// traffic, so take the first that works.
		ice.WithSrflxAcceptanceMinWait(20 * time.Millisecond),
		ice.WithPrflxAcceptanceMinWait(50 * time.Millisecond),
		ice.WithKeepaliveInterval(keepalive),
		ice.WithDisconnectedTimeout(disconnected),
		ice.WithFailedTimeout(failed),
		ice.WithIPFilter(hostCandidateFilter(resp.Address.Addr(), cfg.Candidates)),
		ice.WithLoggerFactory(n.pionLogs()),
	}
	if cfg.Candidates != nil {
		opts = append(opts, ice.WithIncludeLoopback())
	}
	return opts, nil
}
