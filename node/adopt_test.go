package node

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/pion/ice/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// TestAdoptPeerSession: an attempt bound to the peer's previous session
// that gets the peer's new credentials naming our current session takes
// them into the running agent and sends ours again, under the same
// session. Restarting there (as it did) sent new credentials that made
// the peer restart in turn, and a 10 s link flap never recovered in
// virtual time (scenarios/link-flap-long.yaml).
func TestAdoptPeerSession(t *testing.T) {
	var sent [][]byte
	p, ours, theirs := loopbackPeer(func(_ context.Context, _ string, b []byte) error { sent = append(sent, b); return nil }, nil)
	env := p.env
	agent, err := ice.NewAgentWithOptions(env.agentOpt...)
	require.NoError(t, err)
	p.agent = agent
	defer func() { p.stopAgent() }()
	p.ufrag, p.pwd, err = agent.GetLocalUserCredentials()
	require.NoError(t, err)
	p.localCands = []string{"candidate:1 1 udp 2130706431 127.0.0.1 40000 typ host"}
	const session, old, renewed = 1000, 500, 600
	p.session = session
	now := time.Now().UnixMilli()
	require.NoError(t, p.remote.admit(&Signal{Kind: SignalCredentials, Session: old, Seq: 1, Time: now}, time.Now()))
	p.haveRemote, p.boundRemote = true, old

	p.onSignal(context.Background(), &Signal{Kind: SignalCredentials, Session: renewed, Seq: 1, Time: now,
		PeerSession: session, Ufrag: "peerufragpeerufrag", Pwd: "peerpasswordpeerpassword"})

	p.queue().wait() // signals leave through the queue
	assert.Same(t, agent, p.agent, "the running agent stays")
	assert.EqualValues(t, session, p.session, "no new session of ours")
	assert.EqualValues(t, renewed, p.boundRemote, "bound to the peer's new session")
	require.Len(t, sent, 2, "our credentials and our one candidate, again")
	creds, err := OpenSignal(theirs, ours.Public(), sent[0])
	require.NoError(t, err)
	assert.Equal(t, SignalCredentials, creds.Kind)
	assert.EqualValues(t, session, creds.Session)
	assert.EqualValues(t, renewed, creds.PeerSession, "names the session we adopted")
	assert.Equal(t, p.ufrag, creds.Ufrag)
	cand, err := OpenSignal(theirs, ours.Public(), sent[1])
	require.NoError(t, err)
	assert.Equal(t, p.localCands[0], cand.Candidate)
}

// loopbackPeer is a peer actor's state, not running, whose ICE agents
// use loopback host candidates only (nothing leaves the host) and whose
// signals go to signal; edit adjusts its ICEConfig after the defaults.
// It returns our key and the peer's.
func loopbackPeer(signal func(context.Context, string, []byte) error, edit func(*ICEConfig)) (p *peer, ours, theirs key.Private) {
	ours, theirs = key.NewPrivate(), key.NewPrivate()
	env := &peerEnv{
		priv: ours, pub: ours.Public(), log: slog.New(slog.DiscardHandler), now: time.Now, signal: signal,
		agentOpt: []ice.AgentOption{
			ice.WithNetworkTypes([]ice.NetworkType{ice.NetworkTypeUDP4}),
			ice.WithCandidateTypes([]ice.CandidateType{ice.CandidateTypeHost}),
			ice.WithMulticastDNSMode(ice.MulticastDNSModeDisabled),
			ice.WithIncludeLoopback(),
			ice.WithIPFilter(func(ip net.IP) bool { return ip.IsLoopback() }),
		},
	}
	env.cfg.defaults()
	if edit != nil {
		edit(&env.cfg)
	}
	p = &peer{env: env, info: controlapi.Peer{Name: "b", NodeID: "b", PublicKey: theirs.Public()},
		path: &Path{}, box: newMailbox(), controlling: true, attempt: &attempt{}}
	return p, ours, theirs
}
