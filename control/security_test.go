package control

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// joinConn connects as a joining client with the test token.
func joinConn(t testing.TB, url string) *nats.Conn {
	t.Helper()
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	user := joinPrefix + fmt.Sprintf("%x", rnd)
	nc, err := nats.Connect(url, nats.UserInfo(user, testToken), nats.CustomInboxPrefix(controlapi.InboxPrefix+"."+user))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// ask sends one raw registration request on nc.
func ask(t *testing.T, nc *nats.Conn, req controlapi.RegisterRequest) (*controlapi.RegisterResponse, error) {
	t.Helper()
	body, err := json.Marshal(req)
	require.NoError(t, err)
	m, err := nc.RequestWithContext(ctxT(t), controlapi.SubjectRegister, body)
	require.NoError(t, err)
	var resp controlapi.RegisterResponse
	if err := controlapi.DecodeReply(m.Data, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// TestTakeoverRefused: an attacker with the join token and the victim's
// name and public key (every peer list carries them) cannot register the
// victim's key, whatever it answers; the victim keeps its identity and
// its signals (finding 1).
func TestTakeoverRefused(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	victimKey := newPriv(t)
	victim, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "victim", Key: victimKey})
	require.NoError(t, err)
	signals := make(chan string, 4)
	sv, err := controlapi.Connect(ctx, netx.OS, victim.NodeID, victim.NATS, controlapi.Handlers{Signal: func(from string, p []byte) { signals <- from + ":" + string(p) }})
	require.NoError(t, err)
	defer sv.Close()

	nc := joinConn(t, env.url)
	stolen := controlapi.RegisterRequest{Token: testToken, Name: "victim", PublicKey: victimKey.Public()}
	first, err := ask(t, nc, stolen)
	require.NoError(t, err)
	require.NotNil(t, first.Challenge, "a request without proof gets a challenge")
	assert.Empty(t, first.NodeID, "and no identity")
	assert.Empty(t, first.NATS.Password, "and no credentials")
	assert.Empty(t, first.RelayToken, "and no relay token")

	mallory := newPriv(t)
	ownProof, err := controlapi.ProveKey(mallory, first.Challenge, "victim")
	require.NoError(t, err)
	// A challenge of the attacker's own making: it knows that key's
	// private half, so it can compute a MAC against the victim's public key.
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	require.NoError(t, err)
	vp := victimKey.Public()
	vpub, err := ecdh.X25519().NewPublicKey(vp[:])
	require.NoError(t, err)
	shared, err := eph.ECDH(vpub)
	require.NoError(t, err)
	forged := &controlapi.Challenge{Key: key.Public(eph.PublicKey().Bytes()), Nonce: first.Challenge.Nonce, Expires: first.Challenge.Expires}
	late := *first.Challenge
	late.Expires = time.Now().Add(time.Hour).UnixMilli()
	for _, tc := range []struct {
		name      string
		challenge *controlapi.Challenge
		proof     []byte
		want      string
	}{
		{"proof with the attacker's key", first.Challenge, ownProof, "does not verify"},
		{"random proof", first.Challenge, make([]byte, 32), "does not verify"},
		{"self-made challenge", forged, controlapi.ProofMAC(shared, forged, "victim", victimKey.Public()), "not issued by this control"},
		{"challenge moved later", &late, ownProof, "expires too late"},
		{"short proof", first.Challenge, []byte{1}, "proof is 1 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := stolen
			req.Challenge, req.Proof = tc.challenge, tc.proof
			_, err := ask(t, nc, req)
			var e *controlapi.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, controlapi.CodeBadProof, e.Code)
			assert.Contains(t, e.Message, tc.want)
		})
	}

	// The victim's identity did not move: its session still works, a
	// reconnect with its credentials too, and its signals reach it.
	other, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "other", Key: newPriv(t)})
	require.NoError(t, err)
	so, err := controlapi.Connect(ctx, netx.OS, other.NodeID, other.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer so.Close()
	sv2, err := controlapi.Connect(ctx, netx.OS, victim.NodeID, victim.NATS, controlapi.Handlers{})
	require.NoError(t, err, "the victim's credentials still work")
	sv2.Close()
	require.NoError(t, so.Signal(ctx, victim.NodeID, []byte("offer")))
	select {
	case s := <-signals:
		assert.Equal(t, other.NodeID+":offer", s)
	case <-ctx.Done():
		t.Fatal("the victim lost its signals")
	}
	n, err := env.srv.Store().Get(ctx, victim.NodeID)
	require.NoError(t, err)
	assert.Equal(t, victim.Address, n.Address)
	assert.Equal(t, uint64(5), env.srv.Stats().Refused, "every forged answer counted")
}

// TestProofNotReplayed: a proof that registered once is refused the
// second time, even within its challenge's lifetime.
func TestProofNotReplayed(t *testing.T) {
	env := startServer(t, "")
	k := newPriv(t)
	nc := joinConn(t, env.url)
	req := controlapi.RegisterRequest{Token: testToken, Name: "laptop", PublicKey: k.Public()}
	first, err := ask(t, nc, req)
	require.NoError(t, err)
	req.Challenge = first.Challenge
	req.Proof, err = controlapi.ProveKey(k, first.Challenge, "laptop")
	require.NoError(t, err)
	resp, err := ask(t, nc, req)
	require.NoError(t, err)
	require.NotEmpty(t, resp.NATS.Password)

	_, err = ask(t, nc, req)
	var e *controlapi.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, controlapi.CodeBadProof, e.Code)
	assert.Contains(t, e.Message, "used already")
	s, err := controlapi.Connect(ctxT(t), netx.OS, resp.NodeID, resp.NATS, controlapi.Handlers{})
	require.NoError(t, err, "the replay did not rotate the secret")
	s.Close()

	// The proof binds the name: the same answer for another name fails.
	again, err := ask(t, nc, controlapi.RegisterRequest{Token: testToken, Name: "laptop", PublicKey: k.Public()})
	require.NoError(t, err)
	p, err := controlapi.ProveKey(k, again.Challenge, "laptop")
	require.NoError(t, err)
	_, err = ask(t, nc, controlapi.RegisterRequest{Token: testToken, Name: "desktop", PublicKey: k.Public(), Challenge: again.Challenge, Proof: p})
	require.ErrorAs(t, err, &e)
	assert.Equal(t, controlapi.CodeBadProof, e.Code)
}

// TestChallengeExpires: an answer after the challenge's lifetime is refused.
func TestChallengeExpires(t *testing.T) {
	var skew atomic.Int64
	env := startServer(t, "", func(c *Config) { c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) } })
	k := newPriv(t)
	nc := joinConn(t, env.url)
	req := controlapi.RegisterRequest{Token: testToken, Name: "slow", PublicKey: k.Public()}
	first, err := ask(t, nc, req)
	require.NoError(t, err)
	req.Challenge = first.Challenge
	req.Proof, err = controlapi.ProveKey(k, first.Challenge, "slow")
	require.NoError(t, err)
	skew.Store(int64(challengeTTL + time.Second))
	_, err = ask(t, nc, req)
	var e *controlapi.Error
	require.ErrorAs(t, err, &e)
	assert.Contains(t, e.Message, "challenge expired")
	_, err = env.srv.Store().Get(ctxT(t), nodeID(k.Public()))
	require.ErrorIs(t, err, ErrNotFound)
}

// TestReplyInjectionRefused: requests whose reply subject points into
// another node's subjects are refused and nothing reaches that node
// (finding 3).
func TestReplyInjectionRefused(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	a, b := mustRegister(ctx, t, env.url, "alpha"), mustRegister(ctx, t, env.url, "beta")
	got := make(chan string, 16)
	sb, err := controlapi.Connect(ctx, netx.OS, b.NodeID, b.NATS, controlapi.Handlers{
		Peer:   func(ev controlapi.PeerEvent) { got <- "peer " + string(ev.Type) },
		Signal: func(from string, p []byte) { got <- "signal " + string(p) },
	})
	require.NoError(t, err)
	defer sb.Close()

	nc, errs := permissionErrors(t, env.url, a.NATS.User, a.NATS.Password, a.NATS.Inbox)
	targets := []string{controlapi.NodeSubject(b.NodeID, controlapi.LeafSignalIn), controlapi.NodeSubject(b.NodeID, controlapi.LeafPeers), controlapi.InboxPrefix + "." + b.NodeID + ".x"}
	sent := 0
	for _, leaf := range []string{controlapi.LeafPeerList, controlapi.LeafPresence, controlapi.LeafRelayToken, controlapi.LeafSignalOut, controlapi.LeafDeregister} {
		for _, target := range targets {
			m := nats.NewMsg(controlapi.NodeSubject(a.NodeID, leaf))
			m.Reply = target
			m.Header.Set(controlapi.HeaderTo, b.NodeID)
			m.Data = []byte(`{"online":true}`)
			require.NoError(t, nc.PublishMsg(m))
			sent++
		}
	}
	jc := joinConn(t, env.url)
	body, err := json.Marshal(controlapi.RegisterRequest{Token: testToken, Name: "gamma", PublicKey: newKey(t)})
	require.NoError(t, err)
	for _, target := range targets {
		require.NoError(t, jc.PublishRequest(controlapi.SubjectRegister, target, body))
		sent++
	}
	require.NoError(t, nc.Flush())
	require.NoError(t, jc.Flush())
	require.Eventually(t, func() bool { return env.srv.Stats().BadReplies == uint64(sent) }, 5*time.Second, 10*time.Millisecond,
		"refused %d of %d", env.srv.Stats().BadReplies, sent)
	select {
	case m := <-got:
		t.Fatalf("beta received %q", m)
	case <-time.After(200 * time.Millisecond):
	}
	assert.Empty(t, errs(), "the node's own publications were allowed; control refused them")
	_, err = env.srv.Store().Get(ctx, a.NodeID)
	require.NoError(t, err, "a refused deregistration did nothing")
	assert.Zero(t, env.srv.Stats().SignalsRelayed, "a refused signal is not relayed")

	// The node's own inbox still gets its answers.
	sa, err := controlapi.Connect(ctx, netx.OS, a.NodeID, a.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer sa.Close()
	_, err = sa.Peers(ctx)
	require.NoError(t, err)
}

func TestAllowedReply(t *testing.T) {
	const id = "nabcdefghijklmnop"
	for _, tc := range []struct {
		subject, reply string
		want           bool
	}{
		{controlapi.NodeSubject(id, controlapi.LeafPeerList), "", true},
		{controlapi.NodeSubject(id, controlapi.LeafPeerList), "_INBOX." + id + ".abc.1", true},
		{controlapi.NodeSubject(id, controlapi.LeafPeerList), "_INBOX." + id + ".", false},
		{controlapi.NodeSubject(id, controlapi.LeafPeerList), "_INBOX." + id, false},
		{controlapi.NodeSubject(id, controlapi.LeafPeerList), "_INBOX." + id + "x.1", false},
		{controlapi.NodeSubject(id, controlapi.LeafPeerList), "_INBOX.nother.1", false},
		{controlapi.NodeSubject(id, controlapi.LeafPeerList), controlapi.NodeSubject("nother", controlapi.LeafSignalIn), false},
		{controlapi.NodeSubject(id, controlapi.LeafPeerList), "_INBOX.>", false},
		{controlapi.SubjectRegister, "_INBOX.join.0123456789abcdef0123.x", true},
		{controlapi.SubjectRegister, "_INBOX.join.0123456789abcdef0123", false},
		{controlapi.SubjectRegister, "_INBOX.join.short.x", false},
		{controlapi.SubjectRegister, "_INBOX." + id + ".x", false},
		{controlapi.SubjectRegister, controlapi.NodeSubject(id, controlapi.LeafPeers), false},
		{controlapi.SubjectServers, "_INBOX.join.0123456789abcdef0123.x", true},
		{controlapi.SubjectServers, "_INBOX." + id + ".x", false},
		{controlapi.SubjectServers, controlapi.NodeSubject(id, controlapi.LeafSignalIn), false},
		{"other.subject", "_INBOX.x.y", false},
	} {
		assert.Equal(t, tc.want, allowedReply(tc.subject, tc.reply), "%s reply %s", tc.subject, tc.reply)
	}
}
