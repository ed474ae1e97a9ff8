package control

import (
	"context"
	"strings"
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

// testClock is a settable Config.Now.
type testClock struct{ now atomic.Pointer[time.Time] }

func newTestClock(at time.Time) *testClock {
	c := &testClock{}
	c.set(at)
	return c
}

func (c *testClock) set(at time.Time) { c.now.Store(&at) }
func (c *testClock) Now() time.Time   { return *c.now.Load() }

const expiringToken = "expiring-token-0123456789"

var tokenEpoch = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

// expiringServer runs control with one join token that expires 30 minutes
// after tokenEpoch, its clock at tokenEpoch, its registry at path.
func expiringServer(t *testing.T, path string, clock *testClock, tokens ...JoinToken) *testEnv {
	t.Helper()
	if len(tokens) == 0 {
		tokens = []JoinToken{{Value: expiringToken, Expires: tokenEpoch.Add(30 * time.Minute)}}
	}
	return startServer(t, path, func(c *Config) {
		c.Tokens = tokens
		c.Now = clock.Now
	})
}

type registrar struct {
	name string
	reg  func(ctx context.Context, n netx.Network, url string, j controlapi.Join) (*controlapi.RegisterResponse, error)
	url  func(*testEnv) string
}

var registrars = []registrar{
	{"nats", controlapi.RegisterNATS, func(e *testEnv) string { return e.url }},
	{"http", controlapi.RegisterHTTP, func(e *testEnv) string { return e.http }},
}

// TestExpiredTokenKeepsKnownIdentity: a node that joined while the token
// was valid registers again after it expired, and after it was revoked
// (control restarted without it), with its proof of key: same ID and
// address, fresh credentials that NATS accepts.
func TestExpiredTokenKeepsKnownIdentity(t *testing.T) {
	for _, r := range registrars {
		t.Run(r.name, func(t *testing.T) {
			clock := newTestClock(tokenEpoch)
			path := t.TempDir() + "/registry.json"
			env := expiringServer(t, path, clock)
			ctx := ctxT(t)
			j := controlapi.Join{Token: expiringToken, Name: "dave", Key: newPriv(t)}
			first, err := r.reg(ctx, netx.OS, r.url(env), j)
			require.NoError(t, err)

			clock.set(tokenEpoch.Add(time.Hour))
			again, err := r.reg(ctx, netx.OS, r.url(env), j)
			require.NoError(t, err, "a known identity re-registers after the token expired")
			assert.Equal(t, first.NodeID, again.NodeID)
			assert.Equal(t, first.Address, again.Address)
			assert.Greater(t, again.Epoch, first.Epoch)
			s, err := controlapi.Connect(ctx, netx.OS, again.NodeID, again.NATS, controlapi.Handlers{})
			require.NoError(t, err, "with credentials NATS accepts")
			s.Close()

			// Revoked: control restarts with another token only.
			env.srv.Close()
			env = expiringServer(t, path, clock, JoinToken{Value: testToken})
			third, err := r.reg(ctx, netx.OS, r.url(env), j)
			require.NoError(t, err, "a known identity re-registers after its token was revoked")
			assert.Equal(t, first.NodeID, third.NodeID)
			assert.Equal(t, first.Address, third.Address)
		})
	}
}

// TestExpiredTokenAdmitsNoNewIdentity: after expiry the token registers no
// new key, no new name for a known key and no known name for a new key,
// and the refusal says the token expired and when, over NATS (whose login
// no longer hides the reason) and HTTP alike.
func TestExpiredTokenAdmitsNoNewIdentity(t *testing.T) {
	clock := newTestClock(tokenEpoch)
	env := expiringServer(t, "", clock)
	ctx := ctxT(t)
	dave := controlapi.Join{Token: expiringToken, Name: "dave", Key: newPriv(t)}
	_, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, dave)
	require.NoError(t, err)
	before, err := env.srv.cfg.Store.List(ctx)
	require.NoError(t, err)
	clock.set(tokenEpoch.Add(time.Hour))

	for _, r := range registrars {
		for _, tc := range []struct {
			name string
			join controlapi.Join
			want string
		}{
			{"new key", controlapi.Join{Token: expiringToken, Name: "carol", Key: newPriv(t)}, "join token expired at 2026-12-02T00:30:00Z"},
			{"known name, new key", controlapi.Join{Token: expiringToken, Name: "dave", Key: newPriv(t)}, "join token expired at 2026-12-02T00:30:00Z"},
			{"known key, new name", controlapi.Join{Token: expiringToken, Name: "dave2", Key: dave.Key}, "join token expired at 2026-12-02T00:30:00Z"},
			{"unknown token", controlapi.Join{Token: "never-issued-0123456789", Name: "carol", Key: newPriv(t)}, "join token not accepted"},
		} {
			t.Run(r.name+"/"+tc.name, func(t *testing.T) {
				_, err := r.reg(ctx, netx.OS, r.url(env), tc.join)
				var e *controlapi.Error
				require.ErrorAs(t, err, &e)
				assert.Equal(t, controlapi.CodeBadToken, e.Code)
				assert.Equal(t, tc.want, e.Message)
			})
		}
	}
	after, err := env.srv.cfg.Store.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, before, after, "the registry is unchanged")
}

// TestExpiredTokenDeregisteredMidway: a known identity that got its
// challenge with an expired token, and is deregistered before it answers,
// is not created anew by its answer.
func TestExpiredTokenDeregisteredMidway(t *testing.T) {
	clock := newTestClock(tokenEpoch)
	env := expiringServer(t, "", clock)
	ctx := ctxT(t)
	k := newPriv(t)
	reg, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: expiringToken, Name: "dave", Key: k})
	require.NoError(t, err)
	clock.set(tokenEpoch.Add(time.Hour))

	req := controlapi.RegisterRequest{Token: expiringToken, Name: "dave", PublicKey: k.Public()}
	first, err := ask(t, joinConn(t, env.url), req)
	require.NoError(t, err, "a known identity gets its challenge")
	require.NotNil(t, first.Challenge)
	s, err := controlapi.Connect(ctx, netx.OS, reg.NodeID, reg.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	require.NoError(t, s.Deregister(ctx))
	s.Close()

	req.Challenge = first.Challenge
	req.Proof, err = controlapi.ProveKey(k, first.Challenge, "dave")
	require.NoError(t, err)
	_, err = ask(t, joinConn(t, env.url), req)
	var e *controlapi.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, controlapi.CodeBadToken, e.Code)
	assert.Contains(t, e.Message, "join token expired")
	nodes, err := env.srv.cfg.Store.List(ctx)
	require.NoError(t, err)
	assert.Empty(t, nodes, "the deregistered identity stays gone")
}

// TestJoinerWithoutTokenConfined: NATS lets a joining client in whatever
// its password (control judges the token), and such a client may publish
// its registration requests and read its own inbox, nothing else.
func TestJoinerWithoutTokenConfined(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	a, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "alpha", Key: newPriv(t)})
	require.NoError(t, err)
	user := "join.0123456789abcdef0123"
	jc, errs := permissionErrors(t, env.url, user, "not-a-token-at-all", "_INBOX."+user)
	got := make(chan string, 8)
	for _, subj := range []string{"_INBOX.>", controlapi.NodeSubject(a.NodeID, controlapi.LeafPeers), controlapi.NodeSubject(a.NodeID, controlapi.LeafSignalIn), ">"} {
		_, err := jc.Subscribe(subj, func(m *nats.Msg) { got <- m.Subject })
		require.NoError(t, err)
	}
	for _, subj := range []string{controlapi.NodeSubject(a.NodeID, controlapi.LeafSignalOut), controlapi.NodeSubject(a.NodeID, controlapi.LeafDeregister), "$JS.API.INFO", "lattice.v1.other"} {
		require.NoError(t, jc.Publish(subj, []byte("{}")))
	}
	require.NoError(t, jc.Flush())
	require.Eventually(t, func() bool { return len(errs()) >= 8 }, 5*time.Second, 10*time.Millisecond, "violations: %v", errs())
	for _, e := range errs() {
		assert.Contains(t, strings.ToLower(e), "permissions violation")
	}
	_, err = controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "beta", Key: newPriv(t)})
	require.NoError(t, err)
	select {
	case m := <-got:
		t.Fatalf("a joiner without a token read %s", m)
	case <-time.After(200 * time.Millisecond):
	}
	nodes, err := env.srv.cfg.Store.List(ctx)
	require.NoError(t, err)
	assert.Len(t, nodes, 2, "alpha still registered, nothing deregistered")

	// Its registration is answered, with the reason it is refused.
	_, err = controlapi.RegisterOver(ctx, jc, controlapi.Join{Token: "not-a-token-at-all", Name: "mallory", Key: newPriv(t)})
	var e *controlapi.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "bad_token: join token not accepted", e.Error())
}

// TestTokenCheckNamesExpiry: the refusal of an expired token names the
// expiry of the token given, whichever of several it is.
func TestTokenCheckNamesExpiry(t *testing.T) {
	ts := tokenSet{
		{Value: "first-token-0123456789", Expires: tokenEpoch.Add(time.Hour)},
		{Value: "second-token-0123456789", Expires: tokenEpoch.Add(-time.Minute)},
		{Value: "forever-token-0123456789"},
	}
	now := tokenEpoch.Add(2 * time.Hour)
	for _, tc := range []struct{ token, want string }{
		{"first-token-0123456789", "bad_token: join token expired at 2026-12-02T01:00:00Z"},
		{"second-token-0123456789", "bad_token: join token expired at 2026-12-01T23:59:00Z"},
		{"third-token-0123456789", "bad_token: join token not accepted"},
		{"forever-token-0123456789", ""},
	} {
		_, err := ts.check(tc.token, now)
		if tc.want == "" {
			assert.NoError(t, err, tc.token)
			continue
		}
		assert.EqualError(t, err, tc.want, tc.token)
	}
	_, err := ts.check("first-token-0123456789", tokenEpoch)
	assert.NoError(t, err, "live before its expiry")
}

// TestRegisterRefusesNewWithoutToken: register, given the token's refusal
// (a request admitted as a known identity), updates a node that is there
// and creates none that is not: the guard for an identity deregistered
// between admission and storing.
func TestRegisterRefusesNewWithoutToken(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	k := newPriv(t)
	first, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "kept", Key: k})
	require.NoError(t, err)
	refusal := &controlapi.Error{Code: controlapi.CodeBadToken, Message: "join token expired at 2026-12-02T00:30:00Z"}
	for _, tc := range []struct {
		name    string
		key     func() key.Private
		wantErr error
	}{
		{"gone", func() key.Private { return newPriv(t) }, refusal},
		{"kept", func() key.Private { return k }, nil},
	} {
		pk := tc.key()
		req := &controlapi.RegisterRequest{Token: "expired-or-revoked", Name: tc.name, PublicKey: pk.Public()}
		req.Challenge, _, err = newChallenge(env.srv.challengeSecret, req.PublicKey, time.Now())
		require.NoError(t, err)
		req.Proof, err = controlapi.ProveKey(pk, req.Challenge, tc.name)
		require.NoError(t, err)
		resp, err := env.srv.register(ctx, req, nil, admission{refuseNew: refusal})
		if tc.wantErr != nil {
			assert.Equal(t, tc.wantErr, err, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		assert.Equal(t, first.NodeID, resp.NodeID)
	}
	nodes, err := env.srv.Store().List(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	assert.Equal(t, "kept", nodes[0].Name)
}
