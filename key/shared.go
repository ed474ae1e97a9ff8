package key

import (
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"log/slog"

	"golang.org/x/crypto/nacl/box"
)

// Shared is the NaCl box key two nodes share: X25519 of one's private key
// and the other's public key, hashed as box.Precompute does. SealTo and
// OpenFrom compute it anew on every call (an X25519 scalar
// multiplication, the bulk of their cost); a node that signals a peer many
// times computes it once (Private.Shared) and keeps it for as long as the
// peer's key stays the same. Its output is the same as theirs: a box
// sealed with Shared opens with OpenFrom and the other way round.
//
// Like Private it is a secret: it prints a placeholder, Equal runs in
// constant time and == does not compile.
type Shared struct {
	_ [0]func() // not comparable: use Equal
	k [Size]byte
	// peer is the public key k was computed with, so a holder can tell a
	// cached Shared from one for the peer's new key (For).
	peer Public
}

// Shared returns the box key k shares with p.
func (k Private) Shared(p Public) Shared {
	s := Shared{peer: p}
	pk := [Size]byte(p)
	box.Precompute(&s.k, &pk, &k.k)
	return s
}

// For reports whether s is the key shared with p: false for the zero
// Shared and for one computed before the peer changed its key.
func (s *Shared) For(p Public) bool { return !s.IsZero() && s.peer == p }

// IsZero reports, in constant time, whether s is the zero Shared (never
// computed).
func (s *Shared) IsZero() bool {
	var zero [Size]byte
	return subtle.ConstantTimeCompare(s.k[:], zero[:]) == 1
}

// Equal reports, in constant time, whether s and o are the same key.
func (s *Shared) Equal(o *Shared) bool { return subtle.ConstantTimeCompare(s.k[:], o.k[:]) == 1 }

// Seal encrypts and authenticates cleartext as Private.SealTo does: a
// random 24-byte nonce followed by the box.
func (s *Shared) Seal(cleartext []byte) []byte {
	var nonce [24]byte
	_, _ = rand.Read(nonce[:]) // never fails
	return box.SealAfterPrecomputation(nonce[:], cleartext, &nonce, &s.k)
}

// Open opens what the other side sealed with Seal or SealTo; false means
// it was not sealed with this key, or was changed on the way.
func (s *Shared) Open(ciphertext []byte) ([]byte, bool) {
	if len(ciphertext) < 24+box.Overhead {
		return nil, false
	}
	nonce := [24]byte(ciphertext[:24])
	return box.OpenAfterPrecomputation(nil, ciphertext[24:], &nonce, &s.k)
}

const sharedRedacted = "key.Shared{redacted}"

// String returns a placeholder, never the key.
func (s Shared) String() string { return sharedRedacted }

// GoString returns a placeholder for %#v, never the key.
func (s Shared) GoString() string { return sharedRedacted }

// Format prints the placeholder for every verb.
func (s Shared) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(sharedRedacted)) }

// LogValue implements slog.LogValuer with the placeholder.
func (s Shared) LogValue() slog.Value { return slog.StringValue(sharedRedacted) }

// MarshalText fails with ErrNotMarshaled: a shared key is never written
// out.
func (s Shared) MarshalText() ([]byte, error) { return nil, ErrNotMarshaled }

var (
	_ fmt.Formatter  = Shared{}
	_ fmt.GoStringer = Shared{}
	_ slog.LogValuer = Shared{}
)
