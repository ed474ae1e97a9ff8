package control

import (
	"context"
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// Proof of key. A join token says a node may join; it does not say which
// key is the node's. Every public key is in every peer list, so a
// registration that carried only the token and a key would let anyone
// with the token re-register someone else's key and take its NATS
// identity. So registration takes two requests on the same subject (or
// POST): the first, without a proof, is answered with a Challenge (and
// nothing is stored); the second carries the challenge back with Proof,
// an HMAC-SHA256 keyed by the X25519 shared secret of the node's
// WireGuard private key and the challenge's one-time control key. Only
// the holder of the private key can compute it; DERP's ClientInfo, sealed
// to the server key, proves the same thing.
//
// Control needs no state per challenge: its private key is derived from a
// control secret and the challenge's own fields, so any instance sharing
// the secret (through the registry, see secretKeeper) verifies a
// challenge another one issued. (An instance caches the keys it issued
// lately, see challenger, to spare a verify the derivation's cost.) A
// proof is good until the challenge expires; the registry remembers the
// nonce of the last one used, so the same proof is never accepted twice.

// challengeTTL is how long a challenge may be answered.
const challengeTTL = 30 * time.Second

// challengeNonceBytes is the length of Challenge.Nonce.
const challengeNonceBytes = 16

// secretKeeper is an ability of a Store that several control instances
// share: it keeps one random secret they all use to verify each other's
// challenges. A Store without it (FileStore, for one instance) leaves
// each control with a secret of its own.
type secretKeeper interface {
	// ControlSecret returns the shared secret, creating it on first use.
	ControlSecret(ctx context.Context) ([]byte, error)
}

// controlSecret returns the store's shared secret or a fresh one.
func controlSecret(ctx context.Context, st Store) ([]byte, error) {
	if k, ok := st.(secretKeeper); ok {
		b, err := k.ControlSecret(ctx)
		if err != nil {
			return nil, fmt.Errorf("control: shared challenge secret: %w", err)
		}
		return b, nil
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b, nil
}

// challengeKey derives the challenge's private key for pub.
func challengeKey(secret []byte, pub key.Public, nonce []byte, expires int64) (*ecdh.PrivateKey, error) {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("lattice register challenge v1\x00"))
	mac.Write(pub[:])
	mac.Write(nonce)
	mac.Write(binary.BigEndian.AppendUint64(nil, uint64(expires)))
	return ecdh.X25519().NewPrivateKey(mac.Sum(nil))
}

// newChallenge issues a challenge to pub, returning it and its key.
func newChallenge(secret []byte, pub key.Public, now time.Time) (*controlapi.Challenge, *ecdh.PrivateKey, error) {
	c := &controlapi.Challenge{Nonce: make([]byte, challengeNonceBytes), Expires: now.Add(challengeTTL).UnixMilli()}
	_, _ = rand.Read(c.Nonce)
	priv, err := challengeKey(secret, pub, c.Nonce, c.Expires)
	if err != nil {
		return nil, nil, fmt.Errorf("challenge key: %w", err)
	}
	c.Key = key.Public(priv.PublicKey().Bytes())
	return c, priv, nil
}

// errBadProof is the refusal of every proof that does not verify; the
// message names what was wrong, never the expected value.
func errBadProof(format string, a ...any) error {
	return &controlapi.Error{Code: controlapi.CodeBadProof, Message: "proof of key: " + fmt.Sprintf(format, a...)}
}

// verifyProof checks req's answer to its challenge, re-deriving the
// challenge's key from secret.
func verifyProof(secret []byte, req *controlapi.RegisterRequest, now time.Time) error {
	if err := checkChallenge(req, now); err != nil {
		return err
	}
	return verifyDerived(secret, req)
}

// verifyDerived checks req's proof, its challenge already checked, with
// the challenge's key derived from secret.
func verifyDerived(secret []byte, req *controlapi.RegisterRequest) error {
	c := req.Challenge
	priv, err := challengeKey(secret, req.PublicKey, c.Nonce, c.Expires)
	if err != nil {
		return errBadProof("challenge key: %v", err)
	}
	return verifyWith(priv, req)
}

// checkChallenge makes the checks of req's challenge and proof that need
// no key.
func checkChallenge(req *controlapi.RegisterRequest, now time.Time) error {
	c := req.Challenge
	switch {
	case c == nil:
		return errBadProof("a proof without its challenge")
	case len(c.Nonce) != challengeNonceBytes:
		return errBadProof("challenge nonce is %d bytes, want %d", len(c.Nonce), challengeNonceBytes)
	case len(req.Proof) != sha256.Size:
		return errBadProof("proof is %d bytes, want %d", len(req.Proof), sha256.Size)
	case now.UnixMilli() >= c.Expires:
		return errBadProof("challenge expired %v ago; register again", now.Sub(time.UnixMilli(c.Expires)).Round(time.Millisecond))
	case time.UnixMilli(c.Expires).Sub(now) > challengeTTL:
		return errBadProof("challenge expires too late: not one this control issued")
	}
	return nil
}

// verifyWith checks req's proof against priv, the private key control
// derives for req's challenge fields. The comparison of priv's public key
// with the challenge's is free (NewPrivateKey computed it) and names a
// substituted key; the MAC alone would refuse it too, as it binds c.Key
// and is keyed with priv's shared secret, whatever c.Key says.
func verifyWith(priv *ecdh.PrivateKey, req *controlapi.RegisterRequest) error {
	c := req.Challenge
	if subtle.ConstantTimeCompare(priv.PublicKey().Bytes(), c.Key[:]) != 1 {
		return errBadProof("challenge not issued by this control for this key")
	}
	shared, err := sharedWith(priv, req.PublicKey)
	if err != nil {
		return err
	}
	if !hmac.Equal(controlapi.ProofMAC(shared, c, req.Name, req.PublicKey), req.Proof) {
		return errBadProof("does not verify with this public key")
	}
	return nil
}

// sharedWith is the X25519 shared secret of control's priv and a node's
// pub, the key of both proofs' MAC; a key that cannot give one is a
// refused proof.
func sharedWith(priv *ecdh.PrivateKey, pub key.Public) ([]byte, error) {
	pk, err := ecdh.X25519().NewPublicKey(pub[:])
	if err != nil {
		return nil, errBadProof("public key: %v", err)
	}
	shared, err := priv.ECDH(pk)
	if err != nil {
		return nil, errBadProof("public key of low order cannot prove anything")
	}
	return shared, nil
}

// challengeCacheSize bounds the challenge keys a challenger keeps: about
// 4 s of challenges at 1,000 registrations a second, ~1 MiB.
const challengeCacheSize = 4096

// challenger issues and verifies challenges with one secret, keeping the
// private keys of the challenges it issued lately until they are
// answered. crypto/ecdh's NewPrivateKey computes the public key, an
// X25519 scalar multiplication, so re-deriving the key at verify costs as
// much as the ECDH: one of the three multiplications control makes per
// registration. A challenge it does not hold (issued by another instance,
// pushed out by newer ones, or answered already) is re-derived, so the
// cache changes what a verify costs, never its answer: a key is taken
// only for the public key, nonce and expiry it was derived from.
type challenger struct {
	secret []byte

	mu   sync.Mutex // guards the following fields
	keys map[[challengeNonceBytes]byte]issuedKey
	ring [challengeCacheSize][challengeNonceBytes]byte // nonces in issue order; the oldest goes first
	next int                                           // ring's next slot
}

// issuedKey is a cached challenge's key and what it was derived from.
type issuedKey struct {
	pub     key.Public
	expires int64
	priv    *ecdh.PrivateKey
}

func newChallenger(secret []byte) *challenger {
	return &challenger{secret: secret, keys: make(map[[challengeNonceBytes]byte]issuedKey)}
}

// issue is newChallenge, remembering the challenge's key.
func (ch *challenger) issue(pub key.Public, now time.Time) (*controlapi.Challenge, error) {
	c, priv, err := newChallenge(ch.secret, pub, now)
	if err != nil {
		return nil, err
	}
	nonce := [challengeNonceBytes]byte(c.Nonce)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	delete(ch.keys, ch.ring[ch.next])
	ch.ring[ch.next] = nonce
	ch.next = (ch.next + 1) % len(ch.ring)
	ch.keys[nonce] = issuedKey{pub: pub, expires: c.Expires, priv: priv}
	return c, nil
}

// verify is verifyProof, with the challenge's key from the cache if held.
func (ch *challenger) verify(req *controlapi.RegisterRequest, now time.Time) error {
	if err := checkChallenge(req, now); err != nil {
		return err
	}
	if priv := ch.take(req.PublicKey, req.Challenge); priv != nil {
		return verifyWith(priv, req)
	}
	return verifyDerived(ch.secret, req)
}

// take removes and returns the key cached for c issued to pub, nil if
// there is none.
func (ch *challenger) take(pub key.Public, c *controlapi.Challenge) *ecdh.PrivateKey {
	nonce := [challengeNonceBytes]byte(c.Nonce)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	k, ok := ch.keys[nonce]
	if !ok || k.pub != pub || k.expires != c.Expires {
		return nil
	}
	delete(ch.keys, nonce)
	return k.priv
}
