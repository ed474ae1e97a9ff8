package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/crypto/nacl/box"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// Signal is one ICE signaling message between two nodes. Control routes
// it by the sender's authenticated NATS identity but cannot read it: it
// travels sealed with NaCl box between the two nodes' WireGuard keys.
type Signal struct {
	Kind SignalKind `json:"kind"`
	// Session identifies the sender's ICE agent; a new session means the
	// sender restarted ICE and the receiver must too.
	Session uint64 `json:"session"`
	// Seq increases with every signal of a session; replays are refused.
	Seq uint64 `json:"seq"`
	// Time is when it was sealed (Unix ms); stale signals are refused.
	Time int64 `json:"time"`
	// PeerSession, in credentials, is the receiver's session the sender
	// has heard of (0: none). A receiver whose current session differs
	// knows its own credentials were lost and sends them again.
	PeerSession uint64 `json:"peer_session,omitempty"`
	// Epoch is the sender's registration epoch, PeerEpoch the receiver's
	// as the sender knows it (control.Peer.Epoch): see admitEpoch.
	Epoch     uint64 `json:"epoch,omitempty"`
	PeerEpoch uint64 `json:"peer_epoch,omitempty"`
	Ufrag     string `json:"ufrag,omitempty"`
	Pwd       string `json:"pwd,omitempty"`
	Candidate string `json:"candidate,omitempty"`
}

// SignalKind says what a Signal carries.
type SignalKind string

// Signal kinds.
const (
	SignalCredentials SignalKind = "credentials" // Ufrag, Pwd: start or restart ICE
	SignalCandidate   SignalKind = "candidate"   // Candidate: one more candidate
)

// signalMaxAge bounds clock skew and delay: older (or newer) signals are
// refused as replays.
const signalMaxAge = 2 * time.Minute

// Errors from OpenSignal.
var (
	ErrSignalForged = errors.New("signal does not open with the peer's key")
	ErrSignalReplay = errors.New("signal replayed or out of date")
	ErrSignalBad    = errors.New("malformed signal")
)

// sealOverhead is what key.Private.SealTo adds: a 24-byte nonce and the
// box's 16-byte authenticator.
const sealOverhead = 24 + box.Overhead

// SealSignal seals s for peer with priv.
func SealSignal(priv key.Private, peer key.Public, s *Signal) ([]byte, error) {
	sh := priv.Shared(peer)
	return SealSignalShared(&sh, s)
}

// SealSignalShared seals s with the box key shared with the peer
// (key.Private.Shared): what SealSignal does without its X25519.
func SealSignalShared(sh *key.Shared, s *Signal) ([]byte, error) {
	msg, err := json.Marshal(s) //nolint:gosec // ICE's pwd travels sealed to the peer, as it must
	if err != nil {
		return nil, fmt.Errorf("seal signal: %w", err)
	}
	return sh.Seal(msg), nil
}

// OpenSignal opens a sealed signal from peer; it checks nothing about
// freshness (see replayGuard).
func OpenSignal(priv key.Private, peer key.Public, b []byte) (*Signal, error) {
	if len(b) < sealOverhead || len(b) > controlapi.MaxSignalBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrSignalBad, len(b))
	}
	sh := priv.Shared(peer)
	return OpenSignalShared(&sh, b)
}

// OpenSignalShared opens a sealed signal with the box key shared with the
// peer: what OpenSignal does without its X25519.
func OpenSignalShared(sh *key.Shared, b []byte) (*Signal, error) {
	if len(b) < sealOverhead || len(b) > controlapi.MaxSignalBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrSignalBad, len(b))
	}
	msg, ok := sh.Open(b)
	if !ok {
		return nil, ErrSignalForged
	}
	var s Signal
	if err := json.Unmarshal(msg, &s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSignalBad, err)
	}
	switch s.Kind {
	case SignalCredentials:
		if s.Ufrag == "" || s.Pwd == "" || len(s.Ufrag) > 256 || len(s.Pwd) > 256 {
			return nil, fmt.Errorf("%w: credentials without ufrag/pwd", ErrSignalBad)
		}
	case SignalCandidate:
		if s.Candidate == "" || len(s.Candidate) > 1024 {
			return nil, fmt.Errorf("%w: empty or oversized candidate", ErrSignalBad)
		}
	default:
		return nil, fmt.Errorf("%w: kind %q", ErrSignalBad, s.Kind)
	}
	return &s, nil
}

// admitEpoch refuses a signal sealed for another registration of ours
// than the current one (own). A restarted node starts with an empty
// replayGuard, which alone would admit any signal younger than
// signalMaxAge recorded before the restart; the restart registered anew,
// so those name an earlier epoch. own 0: control gives no epochs.
func admitEpoch(own uint64, s *Signal) error {
	if own == 0 || s.PeerEpoch == own {
		return nil
	}
	return fmt.Errorf("%w: sealed for our registration epoch %d, ours is %d", ErrSignalReplay, s.PeerEpoch, own)
}

// learnEpoch raises what we know of the peer's epoch to e (never lowers
// it: a replay carries an older one).
func (p *peer) learnEpoch(e uint64) {
	for {
		cur := p.epoch.Load()
		if e <= cur || p.epoch.CompareAndSwap(cur, e) {
			return
		}
	}
}

// sameButEpoch reports whether a and b differ at most in their epochs: a
// peer's re-registration, which must not restart it.
func sameButEpoch(a, b controlapi.Peer) bool {
	a.Epoch, b.Epoch = 0, 0
	return a.Equal(b)
}

// replayGuard refuses signals older than the newest seen from a peer's
// session, and signals outside signalMaxAge of now.
type replayGuard struct {
	mu      sync.Mutex
	session uint64
	seq     uint64
}

// current is the newest session admitted.
func (g *replayGuard) current() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.session
}

func (g *replayGuard) admit(s *Signal, now time.Time) error {
	age := now.Sub(time.UnixMilli(s.Time))
	if age > signalMaxAge || age < -signalMaxAge {
		return fmt.Errorf("%w: sealed %v ago", ErrSignalReplay, age.Round(time.Second))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case s.Session == g.session && s.Seq <= g.seq:
		return fmt.Errorf("%w: seq %d after %d", ErrSignalReplay, s.Seq, g.seq)
	case s.Session != g.session && s.Kind != SignalCredentials:
		return fmt.Errorf("%w: candidate for unknown session %d", ErrSignalReplay, s.Session)
	case s.Session < g.session:
		return fmt.Errorf("%w: session %d is older than %d", ErrSignalReplay, s.Session, g.session)
	}
	g.session, g.seq = s.Session, s.Seq
	return nil
}
