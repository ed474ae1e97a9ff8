package node

import (
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

func keys() (key.Private, key.Public) {
	k := key.NewPrivate()
	return k, k.Public()
}

func TestSignalSealOpen(t *testing.T) {
	aPriv, aPub := keys()
	bPriv, bPub := keys()
	_, mPub := keys()
	now := time.Now()
	s := &Signal{Kind: SignalCredentials, Session: 7, Seq: 1, Time: now.UnixMilli(), Ufrag: "uf", Pwd: "pw"}
	b, err := SealSignal(aPriv, bPub, s)
	require.NoError(t, err)

	got, err := OpenSignal(bPriv, aPub, b)
	require.NoError(t, err)
	assert.Equal(t, s, got)

	_, err = OpenSignal(bPriv, mPub, b)
	require.ErrorIs(t, err, ErrSignalForged, "opened with the wrong sender")
	b[len(b)-1] ^= 1
	_, err = OpenSignal(bPriv, aPub, b)
	require.ErrorIs(t, err, ErrSignalForged, "a flipped bit")
	_, err = OpenSignal(bPriv, aPub, b[:10])
	require.ErrorIs(t, err, ErrSignalBad)

	bad, err := SealSignal(aPriv, bPub, &Signal{Kind: "offer"})
	require.NoError(t, err)
	_, err = OpenSignal(bPriv, aPub, bad)
	require.ErrorIs(t, err, ErrSignalBad)
}

// TestSignalShared: a signal sealed with the cached shared key opens with
// OpenSignal and one sealed by SealSignal opens with the shared key, so
// nodes that cache and nodes that do not signal each other; a third
// node's shared key opens neither.
func TestSignalShared(t *testing.T) {
	aPriv, aPub := keys()
	bPriv, bPub := keys()
	mPriv, _ := keys()
	s := &Signal{Kind: SignalCandidate, Session: 7, Seq: 2, Time: time.Now().UnixMilli(), Candidate: "c"}
	ab, ba, mb := aPriv.Shared(bPub), bPriv.Shared(aPub), mPriv.Shared(bPub)

	b, err := SealSignalShared(&ab, s)
	require.NoError(t, err)
	got, err := OpenSignal(bPriv, aPub, b)
	require.NoError(t, err)
	assert.Equal(t, s, got)
	_, err = OpenSignalShared(&mb, b)
	require.ErrorIs(t, err, ErrSignalForged)

	b, err = SealSignal(aPriv, bPub, s)
	require.NoError(t, err)
	got, err = OpenSignalShared(&ba, b)
	require.NoError(t, err)
	assert.Equal(t, s, got)
	_, err = OpenSignalShared(&ba, b[:sealOverhead-1])
	require.ErrorIs(t, err, ErrSignalBad)
}

// TestSignalSealedByOldCodeOpens: a signal sealed by the SealSignal that
// took raw [32]byte keys opens, so nodes of both versions signal each
// other. Sender: goldenPriv; receiver: the key below.
func TestSignalSealedByOldCodeOpens(t *testing.T) {
	const (
		receiver = "AAIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eH2A="
		sealed   = "682d38324f5f7df3a2395c360149b10acba2669db022b19c43e27df266c60e13a9f706485e5c1b2a63640def5943dc18" +
			"a826f00818bc2c6c8a1b0e7defc7996ff2660dd30db9ae593708aec85f1d14db157f4ec4c4d291443567606e4c26275e" +
			"a6f149130b80b9e5857dd1fd52e05e1b2a3c797404401bfc3f1e396b207990"
	)
	sender, err := key.ParsePublic(goldenPub)
	require.NoError(t, err)
	priv, err := key.ParsePrivate(receiver)
	require.NoError(t, err)
	b, err := hex.DecodeString(sealed)
	require.NoError(t, err)

	got, err := OpenSignal(priv, sender, b)
	require.NoError(t, err)
	assert.Equal(t, &Signal{Kind: SignalCredentials, Session: 7, Seq: 1, Time: 1796000000000, Ufrag: "uf", Pwd: "pw"}, got)
}

func TestReplayGuard(t *testing.T) {
	now := time.Now()
	at := func(d time.Duration) int64 { return now.Add(d).UnixMilli() }
	var g replayGuard
	creds := func(sess, seq uint64, d time.Duration) *Signal {
		return &Signal{Kind: SignalCredentials, Session: sess, Seq: seq, Time: at(d), Ufrag: "u", Pwd: "p"}
	}
	cand := func(sess, seq uint64) *Signal {
		return &Signal{Kind: SignalCandidate, Session: sess, Seq: seq, Time: at(0), Candidate: "c"}
	}
	require.NoError(t, g.admit(creds(5, 1, 0), now))
	require.NoError(t, g.admit(cand(5, 2), now))
	for name, s := range map[string]*Signal{
		"replayed":        cand(5, 2),
		"older seq":       cand(5, 1),
		"unknown session": cand(6, 3),
		"older session":   creds(4, 9, 0),
		"stale":           creds(9, 1, -3*time.Minute),
		"from the future": creds(9, 1, 3*time.Minute),
	} {
		err := g.admit(s, now)
		assert.True(t, errors.Is(err, ErrSignalReplay), "%s: %v", name, err)
	}
	require.NoError(t, g.admit(creds(6, 1, 0), now), "a new session restarts")
	require.NoError(t, g.admit(cand(6, 2), now))
}

func FuzzOpenSignal(f *testing.F) {
	aPriv, aPub := keys()
	bPriv, bPub := keys()
	good, _ := SealSignal(aPriv, bPub, &Signal{Kind: SignalCandidate, Session: 1, Seq: 1, Time: 1, Candidate: "x"})
	f.Add(good)
	f.Add([]byte{})
	f.Add(make([]byte, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := OpenSignal(bPriv, aPub, b)
		if err == nil && s == nil {
			t.Fatal("nil signal without an error")
		}
		var g replayGuard
		if s != nil {
			_ = g.admit(s, time.Now())
		}
	})
}

func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	st := OpenCredentials(dir + "/node.json")
	id, created, err := LoadOrCreate(st, "laptop")
	require.NoError(t, err)
	assert.True(t, created)
	id.NodeID = "nabc"
	require.NoError(t, st.Save(id))
	again, created, err := LoadOrCreate(OpenCredentials(dir+"/node.json"), "laptop")
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, id, again)
	assert.Equal(t, id.PublicKey(), again.PublicKey())

	_, _, err = LoadOrCreate(OpenCredentials(dir+"/node.json"), "desktop")
	require.ErrorContains(t, err, `stored identity is "laptop"`)

	mem := OpenCredentials("mem:")
	_, err = mem.Load()
	require.ErrorIs(t, err, ErrNoCredentials)
}

func TestCredentialsRefused(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/node.json"
	write := func(content string, mode os.FileMode) {
		require.NoError(t, os.WriteFile(path, []byte(content), mode))
		require.NoError(t, os.Chmod(path, mode))
	}
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"corrupt", `{"version":1,"private_key":`, 0o600, "corrupt (left untouched"},
		{"readable by others", `{"version":1}`, 0o644, "chmod 600"},
		{"no key", `{"version":1,"name":"x"}`, 0o600, "no private key"},
		{"bad key", `{"version":1,"private_key":"!!"}`, 0o600, "corrupt"},
		{"future version", `{"version":2}`, 0o600, "unsupported version 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(tc.content, tc.mode)
			_, _, err := LoadOrCreate(OpenCredentials(path), "x")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			b, _ := os.ReadFile(path)
			assert.Equal(t, tc.content, string(b), "never replaced with a new identity")
		})
	}
}

func TestAdmitEpoch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		own, peer uint64
		wantErr   string
	}{
		{"current", 7, 7, ""},
		{"earlier registration", 7, 6, "sealed for our registration epoch 6, ours is 7"},
		{"later than ours", 7, 8, "sealed for our registration epoch 8, ours is 7"},
		{"sender knows none", 7, 0, "sealed for our registration epoch 0, ours is 7"},
		{"control gives no epochs", 0, 5, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := admitEpoch(tc.own, &Signal{PeerEpoch: tc.peer})
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrSignalReplay)
			assert.EqualError(t, err, ErrSignalReplay.Error()+": "+tc.wantErr)
		})
	}
	var p peer
	p.learnEpoch(5)
	p.learnEpoch(3) // a replay's older epoch
	assert.Equal(t, uint64(5), p.epoch.Load())
	p.learnEpoch(9)
	assert.Equal(t, uint64(9), p.epoch.Load())
	assert.True(t, sameButEpoch(controlapi.Peer{NodeID: "a", Epoch: 1}, controlapi.Peer{NodeID: "a", Epoch: 2}))
	assert.False(t, sameButEpoch(controlapi.Peer{NodeID: "a"}, controlapi.Peer{NodeID: "a", Offline: true}))
}
