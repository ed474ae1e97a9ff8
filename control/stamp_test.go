package control

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// stamped is a registration request of k as name with a stamped proof at
// at for control's register key ck.
func stamped(t *testing.T, k key.Private, name string, ck key.Public, at time.Time) controlapi.RegisterRequest {
	t.Helper()
	req := controlapi.RegisterRequest{Token: testToken, Name: name, PublicKey: k.Public(), SharedEvents: true}
	require.NoError(t, controlapi.ProveKeyAt(k, ck, at, &req))
	return req
}

// TestStampedRegistration: with control's register key (from the control
// URL) a node registers in one request; its answer names the key, as a
// challenge's answer does, for the node's next registration.
func TestStampedRegistration(t *testing.T) {
	env := startServer(t, "")
	ck := env.srv.RegisterKey()
	require.False(t, ck.IsZero())
	k := newPriv(t)

	nc := joinConn(t, env.url)
	var sent int
	resp, err := controlapi.Register(ctxT(t), controlapi.Join{Token: testToken, Name: "laptop", Key: k, ControlKey: ck},
		countedRequests(nc, &sent))
	require.NoError(t, err)
	assert.Equal(t, 1, sent, "one request")
	assert.Equal(t, nodeID(k.Public()), resp.NodeID)
	assert.Equal(t, ck, resp.ControlKey)
	s, err := controlapi.Connect(ctxT(t), netx.OS, resp.NodeID, resp.NATS, controlapi.Handlers{})
	require.NoError(t, err, "its credentials work")
	s.Close()

	// The key in the URL does the same over NATS and HTTP.
	url, err := controlapi.WithTrust(env.url, "", false)
	require.NoError(t, err)
	for _, r := range []struct {
		name string
		do   func(ctx context.Context, n netx.Network, url string, j controlapi.Join) (*controlapi.RegisterResponse, error)
		url  string
	}{
		{"nats", controlapi.RegisterNATS, url},
		{"http", controlapi.RegisterHTTP, env.http},
	} {
		t.Run(r.name, func(t *testing.T) {
			before := env.srv.Stats()
			resp, err := r.do(ctxT(t), netx.OS, r.url+"?key="+ck.Hex(), controlapi.Join{Token: testToken, Name: r.name, Key: newPriv(t)})
			require.NoError(t, err)
			assert.Equal(t, ck, resp.ControlKey)
			after := env.srv.Stats()
			assert.Equal(t, before.Registered+1, after.Registered)
			assert.Equal(t, before.Refused, after.Refused)
		})
	}
}

// TestStampedProofNotReplayed: a stamped proof registers once. Sent again
// (or one stamped earlier for the same key) it is refused, and nothing
// stored changes: the node's credentials and epoch stay. After the node
// deregistered, the replay is still refused and creates nothing. A later
// stamp registers.
func TestStampedProofNotReplayed(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	ck := env.srv.RegisterKey()
	k := newPriv(t)
	nc := joinConn(t, env.url)
	at := time.Now()
	req := stamped(t, k, "laptop", ck, at)
	resp, err := ask(t, nc, req)
	require.NoError(t, err)
	require.NotEmpty(t, resp.NATS.Password)
	stored, err := env.srv.Store().Get(ctx, resp.NodeID)
	require.NoError(t, err)
	assert.Equal(t, req.Stamp, stored.ProofStamp)

	refused := func(t *testing.T, req controlapi.RegisterRequest) {
		t.Helper()
		_, err := ask(t, nc, req)
		var e *controlapi.Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, controlapi.CodeBadProof, e.Code)
		assert.Contains(t, e.Message, "used already")
	}
	refused(t, req)
	refused(t, stamped(t, k, "laptop", ck, at.Add(-time.Millisecond)))
	again, err := env.srv.Store().Get(ctx, resp.NodeID)
	require.NoError(t, err)
	assert.Equal(t, stored, again, "the replays changed nothing stored")
	s, err := controlapi.Connect(ctx, netx.OS, resp.NodeID, resp.NATS, controlapi.Handlers{})
	require.NoError(t, err, "the replays did not rotate the secret")

	// The record's stamp alone refuses a replay too: another instance
	// sharing the registry (here one with the same secret) took none.
	other, err := newStamper(env.srv.challengeSecret)
	require.NoError(t, err)
	require.Equal(t, ck, other.pub, "every instance sharing the secret has the key")
	forget := func() {
		env.srv.stamps.mu.Lock()
		env.srv.stamps.taken = map[key.Public]int64{}
		env.srv.stamps.mu.Unlock()
	}
	forget()
	refused(t, req)

	// Deregistered, the record is gone; the instance remembers the stamp
	// (taken again by the refused replay above).
	require.NoError(t, s.Deregister(ctx))
	s.Close()
	_, err = env.srv.Store().Get(ctx, resp.NodeID)
	require.ErrorIs(t, err, ErrNotFound)
	refused(t, req)
	_, err = env.srv.Store().Get(ctx, resp.NodeID)
	require.ErrorIs(t, err, ErrNotFound, "the replay created nothing")

	later, err := ask(t, nc, stamped(t, k, "laptop", ck, at.Add(time.Millisecond)))
	require.NoError(t, err, "a later stamp registers")
	assert.Equal(t, resp.NodeID, later.NodeID)

	// A challenge's proof after a stamped one keeps the stamp: the old
	// stamped proof stays refused.
	first, err := ask(t, nc, controlapi.RegisterRequest{Token: testToken, Name: "laptop", PublicKey: k.Public()})
	require.NoError(t, err)
	creq := controlapi.RegisterRequest{Token: testToken, Name: "laptop", PublicKey: k.Public(), Challenge: first.Challenge}
	creq.Proof, err = controlapi.ProveKey(k, first.Challenge, "laptop")
	require.NoError(t, err)
	_, err = ask(t, nc, creq)
	require.NoError(t, err)
	forget()
	refused(t, stamped(t, k, "laptop", ck, at.Add(time.Millisecond)))
}

// TestStampedProofForged: an attacker with the join token and the
// victim's name and public key cannot make a stamped proof control takes,
// whatever it signs with; each is refused and nothing is stored.
func TestStampedProofForged(t *testing.T) {
	env := startServer(t, "")
	ck := env.srv.RegisterKey()
	victim := newPriv(t)
	mallory := newPriv(t)
	nc := joinConn(t, env.url)
	now := time.Now()

	// An ephemeral key pretending to be control's: the attacker knows its
	// private half, so it can compute a MAC against the victim's key.
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	require.NoError(t, err)
	vp := victim.Public()
	vpub, err := ecdh.X25519().NewPublicKey(vp[:])
	require.NoError(t, err)
	ephShared, err := eph.ECDH(vpub)
	require.NoError(t, err)

	tests := []struct {
		name    string
		forge   func(r *controlapi.RegisterRequest)
		wantErr string
	}{
		{"signed with the attacker's key", func(r *controlapi.RegisterRequest) {
			own := stamped(t, mallory, "victim", ck, now)
			r.Proof = own.Proof
		}, "does not verify"},
		{"random proof", func(r *controlapi.RegisterRequest) { r.Proof = make([]byte, 32) }, "does not verify"},
		{"short proof", func(r *controlapi.RegisterRequest) { r.Proof = []byte{1} }, "proof is 1 bytes"},
		{"another name", func(r *controlapi.RegisterRequest) { r.Name = "mallory" }, "does not verify"},
		{"another token", func(r *controlapi.RegisterRequest) { r.Token = testToken + "x" }, "not accepted"},
		{"shared events flipped", func(r *controlapi.RegisterRequest) { r.SharedEvents = false }, "does not verify"},
		{"stamp moved", func(r *controlapi.RegisterRequest) { r.Stamp++ }, "does not verify"},
		{"MAC with a self-made control key, sent as control's", func(r *controlapi.RegisterRequest) {
			r.Proof = controlapi.StampedProofMAC(ephShared, r)
		}, "does not verify"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The attacker starts from a real proof of the victim's,
			// for another control: right MAC, wrong key.
			req := controlapi.RegisterRequest{Token: testToken, Name: "victim", PublicKey: victim.Public(), SharedEvents: true,
				Stamp: now.UnixNano(), ControlKey: ck, Proof: make([]byte, 32)}
			tc.forge(&req)
			_, err := ask(t, nc, req)
			var e *controlapi.Error
			require.ErrorAs(t, err, &e)
			assert.Contains(t, e.Message, tc.wantErr)
			_, err = env.srv.Store().Get(ctxT(t), nodeID(victim.Public()))
			require.ErrorIs(t, err, ErrNotFound)
		})
	}
	assert.Equal(t, uint64(len(tests)), env.srv.Stats().Refused, "every forgery counted")
	assert.Zero(t, env.srv.Stats().Registered)
}

// TestStampedProofChallenged: a stamp control cannot judge (another
// register key, a clock too far off) is answered with a challenge and
// control's key, as a request without a proof; nothing is stored, and
// the client's Register goes on to the challenge's proof.
func TestStampedProofChallenged(t *testing.T) {
	env := startServer(t, "")
	ck := env.srv.RegisterKey()
	now := time.Now()
	for i, tc := range []struct {
		name string
		ck   key.Public
		at   time.Time
	}{
		{"another control's key (control restarted)", key.NewPrivate().Public(), now},
		{"stamp too old", ck, now.Add(-stampWindow - time.Second)},
		{"stamp too far ahead", ck, now.Add(stampWindow + time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newPriv(t)
			name := fmt.Sprintf("node-%d", i)
			nc := joinConn(t, env.url)
			resp, err := ask(t, nc, stamped(t, k, name, tc.ck, tc.at))
			require.NoError(t, err)
			require.NotNil(t, resp.Challenge)
			assert.Equal(t, ck, resp.ControlKey)
			assert.Empty(t, resp.NodeID)
			assert.Empty(t, resp.NATS.Password)
			_, err = env.srv.Store().Get(ctxT(t), nodeID(k.Public()))
			require.ErrorIs(t, err, ErrNotFound)

			var sent int
			reg, err := controlapi.Register(ctxT(t), controlapi.Join{Token: testToken, Name: name, Key: k, ControlKey: tc.ck, Now: func() time.Time { return tc.at }},
				countedRequests(nc, &sent))
			require.NoError(t, err)
			assert.Equal(t, 2, sent, "the stamp, then the challenge's proof")
			assert.Equal(t, nodeID(k.Public()), reg.NodeID)
		})
	}
}

// TestStamperTake: stamps are taken in increasing order per key, and
// stale ones are swept.
func TestStamperTake(t *testing.T) {
	st, err := newStamper([]byte("stamper test secret"))
	require.NoError(t, err)
	a, b := key.NewPrivate().Public(), key.NewPrivate().Public()
	now := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) int64 { return now.Add(d).UnixNano() }
	assert.True(t, st.take(a, at(0), now))
	assert.False(t, st.take(a, at(0), now), "the same stamp")
	assert.False(t, st.take(a, at(-1), now), "an earlier one")
	assert.True(t, st.take(b, at(-1), now), "another key's")
	assert.True(t, st.take(a, at(1), now), "a later one")
	later := now.Add(3 * stampWindow)
	assert.True(t, st.take(b, later.UnixNano(), later))
	assert.NotContains(t, st.taken, a, "swept: judge refuses a's stamps by their age now")
	assert.Len(t, st.taken, 1)
}

// TestOldControlRefusesStamp: a control from before stamped proofs
// refuses a stamped request as malformed (its Validate wants a challenge
// with every proof); the client then registers with a challenge.
func TestOldControlRefusesStamp(t *testing.T) {
	env := startServer(t, "")
	k := newPriv(t)
	nc := joinConn(t, env.url)
	var bodies []controlapi.RegisterRequest
	resp, err := controlapi.Register(ctxT(t), controlapi.Join{Token: testToken, Name: "laptop", Key: k, ControlKey: key.NewPrivate().Public()},
		func(ctx context.Context, body []byte) ([]byte, error) {
			var r controlapi.RegisterRequest
			require.NoError(t, json.Unmarshal(body, &r))
			bodies = append(bodies, r)
			if r.Stamp != 0 {
				// What the control before this change answered.
				return json.Marshal(controlapi.ErrorReply{Error: &controlapi.Error{Code: controlapi.CodeBadRequest, Message: "challenge and proof come together or not at all"}})
			}
			m, err := nc.RequestWithContext(ctx, controlapi.SubjectRegister, body)
			if err != nil {
				return nil, err
			}
			return m.Data, nil
		})
	require.NoError(t, err)
	require.Len(t, bodies, 3, "the stamp, then a challenge and its proof")
	assert.Nil(t, bodies[1].Proof)
	assert.Zero(t, bodies[1].Stamp)
	assert.NotNil(t, bodies[2].Challenge)
	assert.Equal(t, nodeID(k.Public()), resp.NodeID)

	// Any other refusal ends the registration (a new key: a known one is
	// admitted on its proof alone).
	_, err = controlapi.Register(ctxT(t), controlapi.Join{Token: "wrong", Name: "desktop", Key: newPriv(t), ControlKey: env.srv.RegisterKey()},
		func(ctx context.Context, body []byte) ([]byte, error) {
			m, err := nc.RequestWithContext(ctx, controlapi.SubjectRegister, body)
			if err != nil {
				return nil, err
			}
			return m.Data, nil
		})
	var e *controlapi.Error
	require.True(t, errors.As(err, &e), "%v", err)
	assert.Equal(t, controlapi.CodeBadToken, e.Code)
}

// TestStampedProofBadControlKey: a control key no proof can be made with
// (a low-order point, given by mistake) leaves the node registering with
// a challenge, not failing.
func TestStampedProofBadControlKey(t *testing.T) {
	env := startServer(t, "")
	var probe controlapi.RegisterRequest
	require.Error(t, controlapi.ProveKeyAt(newPriv(t), key.Public{1}, time.Now(), &probe), "u=1 is of order 4")
	var sent int
	nc := joinConn(t, env.url)
	resp, err := controlapi.Register(ctxT(t), controlapi.Join{Token: testToken, Name: "laptop", Key: newPriv(t), ControlKey: key.Public{1}},
		countedRequests(nc, &sent))
	require.NoError(t, err)
	assert.Equal(t, 2, sent, "the challenge and its proof")
	assert.Equal(t, env.srv.RegisterKey(), resp.ControlKey)
}

// countedRequests sends register requests over nc, counting them in sent.
func countedRequests(nc *nats.Conn, sent *int) func(context.Context, []byte) ([]byte, error) {
	return func(ctx context.Context, body []byte) ([]byte, error) {
		*sent++
		m, err := nc.RequestWithContext(ctx, controlapi.SubjectRegister, body)
		if err != nil {
			return nil, err
		}
		return m.Data, nil
	}
}

// TestRegisterDialedHook: a NATS registration calls Join.Dialed once, when
// its TCP connection is up, before Join.Connected (its NATS connection
// up): the node dials its session's connection then, in an order that
// does not depend on scheduling.
func TestRegisterDialedHook(t *testing.T) {
	env := startServer(t, "")
	var calls []string
	j := controlapi.Join{Token: testToken, Name: "laptop", Key: newPriv(t),
		Dialed: func() { calls = append(calls, "dialed") }, Connected: func() { calls = append(calls, "connected") }}
	_, err := controlapi.RegisterNATS(ctxT(t), netx.OS, env.url+"?key="+env.srv.RegisterKey().Hex(), j)
	require.NoError(t, err)
	assert.Equal(t, []string{"dialed", "connected"}, calls)
}
