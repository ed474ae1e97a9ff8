package controlapi

import (
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/latticelab/lattice/key"
)

// Proof of key: a registration answers control's Challenge with an
// HMAC-SHA256 keyed by the X25519 shared secret of the node's WireGuard
// private key and the challenge's one-time control key (package control,
// proof.go, says why and how control verifies it).

// Challenge is control's question to a registering node.
type Challenge struct {
	// Key is control's X25519 public key for this challenge only.
	Key key.Public `json:"key"`
	// Nonce makes the challenge unique (16 random bytes).
	Nonce []byte `json:"nonce"`
	// Expires is when control stops accepting answers (Unix ms).
	Expires int64 `json:"expires"`
}

// ProofMAC is the proof for c, name and pub given the X25519 shared
// secret: what ProveKey sends and control recomputes to verify it.
func ProofMAC(shared []byte, c *Challenge, name string, pub key.Public) []byte {
	mac := hmac.New(sha256.New, shared)
	mac.Write([]byte("lattice register proof v1\x00"))
	mac.Write(pub[:])
	mac.Write(c.Key[:])
	mac.Write(c.Nonce)
	mac.Write(binary.BigEndian.AppendUint64(nil, uint64(c.Expires)))
	mac.Write([]byte{byte(len(name))})
	mac.Write([]byte(name))
	return mac.Sum(nil)
}

// ProveKey answers c for a node named name holding priv.
func ProveKey(priv key.Private, c *Challenge, name string) ([]byte, error) {
	shared, pub, err := sharedKey(priv, c.Key)
	if err != nil {
		return nil, fmt.Errorf("prove key: challenge key: %w", err)
	}
	return ProofMAC(shared, c, name, pub), nil
}

// sharedKey is the X25519 shared secret of priv and their, both proofs'
// MAC key, and priv's public key, which the same step computes (priv.Public
// would do it again).
func sharedKey(priv key.Private, their key.Public) (shared []byte, pub key.Public, err error) {
	raw := priv.Reveal()
	sk, err := ecdh.X25519().NewPrivateKey(raw[:])
	if err != nil {
		return nil, key.Public{}, err
	}
	pk, err := ecdh.X25519().NewPublicKey(their[:])
	if err != nil {
		return nil, key.Public{}, err
	}
	if shared, err = sk.ECDH(pk); err != nil {
		return nil, key.Public{}, err
	}
	return shared, key.Public(sk.PublicKey().Bytes()), nil
}

// A stamped proof needs no challenge: the node keys its MAC with the
// X25519 shared secret of its private key and control's static register
// key (RegisterResponse.ControlKey, or the control URL's ParamControlKey),
// over a timestamp of its own clock and the request's fields. Control
// takes each key's stamps in increasing order only, so a proof is
// accepted once; a stamp it cannot judge (another control key, a clock
// too far off) is answered with a challenge, as a request without a
// proof is. Registration then takes one request instead of two.

// StampedProofMAC is the stamped proof of req (its Stamp and ControlKey
// set) given the X25519 shared secret of req.PublicKey's private key and
// req.ControlKey's: what ProveKeyAt sends and control recomputes. It
// binds every field a registration acts on, so none can be swapped.
func StampedProofMAC(shared []byte, req *RegisterRequest) []byte {
	mac := hmac.New(sha256.New, shared)
	mac.Write([]byte("lattice register stamped proof v1\x00"))
	mac.Write(req.PublicKey[:])
	mac.Write(req.ControlKey[:])
	mac.Write(binary.BigEndian.AppendUint64(nil, uint64(req.Stamp)))
	tok := sha256.Sum256([]byte(req.Token))
	mac.Write(tok[:])
	shared1 := byte(0)
	if req.SharedEvents {
		shared1 = 1
	}
	mac.Write([]byte{shared1, byte(len(req.Name))})
	mac.Write([]byte(req.Name))
	return mac.Sum(nil)
}

// ProveKeyAt sets req's Stamp to at, its ControlKey to control and its
// Proof to the stamped proof by priv, req.PublicKey's private key.
func ProveKeyAt(priv key.Private, control key.Public, at time.Time, req *RegisterRequest) error {
	shared, _, err := sharedKey(priv, control)
	if err != nil {
		return fmt.Errorf("prove key: control key: %w", err)
	}
	req.Stamp, req.ControlKey, req.Challenge = at.UnixNano(), control, nil
	req.Proof = StampedProofMAC(shared, req)
	return nil
}
