package control

import (
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// Stamped proofs (controlapi.ProveKeyAt): a registration in one request.
// The node keys its MAC with the X25519 shared secret of its WireGuard
// private key and control's static register key, over the time on its
// own clock and every field of the request; it learns the key from the
// control URL or from its last registration's answer. Like WireGuard's
// TAI64N timestamp in a handshake initiation, a stamp is accepted only
// if it is later than the last one taken for the key, so a proof is
// never accepted twice: the registry remembers the last stamp with the
// node (Node.ProofStamp), and each instance the stamps it took within
// stampWindow (stamper.taken), which covers a node that deregistered
// meanwhile. A stamp further than stampWindow from control's clock, or a
// proof keyed to another register key (control restarted with another
// secret), is answered with a challenge, as a request without a proof:
// such a node registers in two requests, as before.
//
// The register key is derived from the challenge secret, so every
// instance sharing the registry has the same one. Verifying a stamped
// proof costs one X25519 multiplication, a challenge's three.

// stampWindow is how far a stamped proof's time may be from control's
// clock, either way.
const stampWindow = 10 * time.Second

// stamper verifies stamped proofs with control's register key.
type stamper struct {
	priv *ecdh.PrivateKey
	pub  key.Public

	mu    sync.Mutex           // guards the following fields
	taken map[key.Public]int64 // per key, the last stamp taken within stampWindow
	swept time.Time            // when taken was last cleared of stale stamps
}

// newStamper derives the register key from secret.
func newStamper(secret []byte) (*stamper, error) {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("lattice register control key v1\x00"))
	priv, err := ecdh.X25519().NewPrivateKey(mac.Sum(nil))
	if err != nil {
		return nil, fmt.Errorf("control: register key: %w", err)
	}
	return &stamper{priv: priv, pub: key.Public(priv.PublicKey().Bytes()), taken: map[key.Public]int64{}}, nil
}

// judge checks req's stamped proof. ok false with a nil error: control
// cannot judge the stamp (another register key, or a time too far from
// now) and answers with a challenge. An error refuses a proof that does
// not verify.
func (st *stamper) judge(req *controlapi.RegisterRequest, now time.Time) (ok bool, err error) {
	if req.ControlKey != st.pub {
		return false, nil
	}
	if d := time.Unix(0, req.Stamp).Sub(now); d > stampWindow || d < -stampWindow {
		return false, nil
	}
	if len(req.Proof) != sha256.Size {
		return false, errBadProof("proof is %d bytes, want %d", len(req.Proof), sha256.Size)
	}
	shared, err := sharedWith(st.priv, req.PublicKey)
	if err != nil {
		return false, err
	}
	if !hmac.Equal(controlapi.StampedProofMAC(shared, req), req.Proof) {
		return false, errBadProof("does not verify with this public key")
	}
	return true, nil
}

// take records stamp as pub's last, or reports false if this instance
// took it or a later one for pub within stampWindow. The caller holds
// pub's registration lock.
func (st *stamper) take(pub key.Public, stamp int64, now time.Time) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if last, ok := st.taken[pub]; ok && stamp <= last {
		return false
	}
	if now.Sub(st.swept) > stampWindow {
		// A stamp older than the window is refused by judge anyway.
		for k, s := range st.taken {
			if now.Sub(time.Unix(0, s)) > 2*stampWindow {
				delete(st.taken, k)
			}
		}
		st.swept = now
	}
	st.taken[pub] = stamp
	return true
}
