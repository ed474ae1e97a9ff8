package control

import (
	"crypto/ecdh"
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// TestChallengerCache: a challenger verifies from its cache exactly what
// verifyProof does from the secret alone: the cached key is taken once,
// only for the key, nonce and expiry it was made for, and a challenge it
// does not hold (another instance's, pushed out, answered already) is
// re-derived with the same answer.
func TestChallengerCache(t *testing.T) {
	secret := []byte("challenger test secret 0123456789")
	now := time.UnixMilli(1_800_000_000_000)
	node := key.NewPrivate()
	other := key.NewPrivate()

	// forge answers c with a challenge key of its own making, for whose
	// private half it can compute the MAC against the node's public key.
	forge := func(t *testing.T, c *controlapi.Challenge) (*controlapi.Challenge, []byte) {
		t.Helper()
		eph, err := ecdh.X25519().GenerateKey(rand.Reader)
		require.NoError(t, err)
		np := node.Public()
		pk, err := ecdh.X25519().NewPublicKey(np[:])
		require.NoError(t, err)
		shared, err := eph.ECDH(pk)
		require.NoError(t, err)
		f := &controlapi.Challenge{Key: key.Public(eph.PublicKey().Bytes()), Nonce: c.Nonce, Expires: c.Expires}
		return f, controlapi.ProofMAC(shared, f, "n", np)
	}
	tests := []struct {
		name     string
		verifier func(issuer *challenger) *challenger
		answer   func(t *testing.T, c *controlapi.Challenge) (controlapi.RegisterRequest, error)
		wantErr  string
		wantHit  bool // the issuer's cached key was used
	}{
		{
			name:     "cached",
			verifier: func(issuer *challenger) *challenger { return issuer },
			wantHit:  true,
		},
		{
			name:     "another instance's challenge",
			verifier: func(*challenger) *challenger { return newChallenger(secret) },
		},
		{
			name:     "another secret",
			verifier: func(*challenger) *challenger { return newChallenger([]byte("another secret")) },
			wantErr:  "not issued by this control",
		},
		{
			name:     "forged challenge key, cached",
			verifier: func(issuer *challenger) *challenger { return issuer },
			answer: func(t *testing.T, c *controlapi.Challenge) (controlapi.RegisterRequest, error) {
				f, proof := forge(t, c)
				return controlapi.RegisterRequest{Name: "n", PublicKey: node.Public(), Challenge: f, Proof: proof}, nil
			},
			wantErr: "not issued by this control",
			wantHit: true,
		},
		{
			name:     "forged challenge key, re-derived",
			verifier: func(*challenger) *challenger { return newChallenger(secret) },
			answer: func(t *testing.T, c *controlapi.Challenge) (controlapi.RegisterRequest, error) {
				f, proof := forge(t, c)
				return controlapi.RegisterRequest{Name: "n", PublicKey: node.Public(), Challenge: f, Proof: proof}, nil
			},
			wantErr: "not issued by this control",
		},
		{
			name:     "another key's challenge",
			verifier: func(issuer *challenger) *challenger { return issuer },
			answer: func(t *testing.T, c *controlapi.Challenge) (controlapi.RegisterRequest, error) {
				proof, err := controlapi.ProveKey(other, c, "n")
				return controlapi.RegisterRequest{Name: "n", PublicKey: other.Public(), Challenge: c, Proof: proof}, err
			},
			wantErr: "not issued by this control",
		},
		{
			name:     "expiry moved",
			verifier: func(issuer *challenger) *challenger { return issuer },
			answer: func(t *testing.T, c *controlapi.Challenge) (controlapi.RegisterRequest, error) {
				moved := *c
				moved.Expires--
				proof, err := controlapi.ProveKey(node, &moved, "n")
				return controlapi.RegisterRequest{Name: "n", PublicKey: node.Public(), Challenge: &moved, Proof: proof}, err
			},
			wantErr: "not issued by this control",
		},
		{
			name:     "another name",
			verifier: func(issuer *challenger) *challenger { return issuer },
			answer: func(t *testing.T, c *controlapi.Challenge) (controlapi.RegisterRequest, error) {
				proof, err := controlapi.ProveKey(node, c, "n")
				return controlapi.RegisterRequest{Name: "m", PublicKey: node.Public(), Challenge: c, Proof: proof}, err
			},
			wantErr: "does not verify",
			wantHit: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			issuer := newChallenger(secret)
			c, err := issuer.issue(node.Public(), now)
			require.NoError(t, err)
			answer := tt.answer
			if answer == nil {
				answer = func(t *testing.T, c *controlapi.Challenge) (controlapi.RegisterRequest, error) {
					proof, err := controlapi.ProveKey(node, c, "n")
					return controlapi.RegisterRequest{Name: "n", PublicKey: node.Public(), Challenge: c, Proof: proof}, err
				}
			}
			req, err := answer(t, c)
			require.NoError(t, err)
			v := tt.verifier(issuer)
			err = v.verify(&req, now.Add(time.Second))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.wantHit, len(issuer.keys) == 0, "the issuer's key was taken")
			// The stateless check agrees, and so does the same verifier
			// again, now without the cached key.
			again := req
			if tt.wantErr != "" {
				require.ErrorContains(t, verifyProof(v.secret, &again, now.Add(time.Second)), tt.wantErr)
				require.ErrorContains(t, v.verify(&again, now.Add(time.Second)), tt.wantErr)
			} else {
				require.NoError(t, verifyProof(v.secret, &again, now.Add(time.Second)))
				require.NoError(t, v.verify(&again, now.Add(time.Second)))
			}
		})
	}
}

// TestChallengerBounded: the cache holds at most challengeCacheSize keys,
// the oldest going first, and a challenge pushed out still verifies.
func TestChallengerBounded(t *testing.T) {
	ch := newChallenger([]byte("bounded"))
	now := time.UnixMilli(1_800_000_000_000)
	node := key.NewPrivate()
	var first, last *controlapi.Challenge
	for i := range challengeCacheSize + 10 {
		c, err := ch.issue(node.Public(), now)
		require.NoError(t, err)
		if i == 0 {
			first = c
		}
		last = c
	}
	require.Len(t, ch.keys, challengeCacheSize)
	for _, c := range []*controlapi.Challenge{first, last} {
		proof, err := controlapi.ProveKey(node, c, "n")
		require.NoError(t, err)
		require.NoError(t, ch.verify(&controlapi.RegisterRequest{Name: "n", PublicKey: node.Public(), Challenge: c, Proof: proof}, now))
	}
	assert.Len(t, ch.keys, challengeCacheSize-1, "the last one was taken from the cache, the first was not in it")
}
