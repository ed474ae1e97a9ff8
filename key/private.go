package key

import (
	"crypto/ecdh"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/crypto/nacl/box"
)

// Private is a node's WireGuard private key. It does not print itself:
// String, every fmt verb, slog and MarshalText show a placeholder or fail,
// so a key held in a logged or encoded struct stays secret. The secret
// leaves this package only through the Reveal methods; keep their callers
// few (the credentials file, WireGuard's UAPI). Equal and IsZero run in
// constant time, and == does not compile.
type Private struct {
	_ [0]func() // not comparable: use Equal
	k [Size]byte
}

// redacted is what a Private prints instead of itself.
const redacted = "key.Private{redacted}"

// ErrNotMarshaled is what MarshalText returns: a private key is written
// only where its owner spells out RevealBase64.
var ErrNotMarshaled = errors.New("key: a private key is not marshaled; use RevealBase64")

// NewPrivate returns a fresh private key from crypto/rand, clamped as
// X25519 and `wg genkey` clamp it.
func NewPrivate() Private {
	var k Private
	_, _ = rand.Read(k.k[:]) // never fails: crypto/rand crashes the program instead
	k.k[0] &= 248
	k.k[31] = (k.k[31] & 127) | 64
	return k
}

// PrivateFromRaw returns the private key with raw bytes b, as they are.
func PrivateFromRaw(b [Size]byte) Private { return Private{k: b} }

// ParsePrivate parses the standard base64 form `wg genkey` prints. Its
// errors never quote s.
func ParsePrivate(s string) (Private, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return Private{}, fmt.Errorf("private key is not base64: %w", err)
	}
	if len(b) != Size {
		return Private{}, fmt.Errorf("private key is %d bytes, want %d", len(b), Size)
	}
	return Private{k: [Size]byte(b)}, nil
}

// Public returns k's X25519 public key.
func (k Private) Public() Public {
	// NewPrivateKey fails only for a wrong length, and X25519 clamps the
	// scalar itself, so any 32 bytes are a key.
	p, err := ecdh.X25519().NewPrivateKey(k.k[:])
	if err != nil {
		panic("key: X25519 rejected a 32-byte key: " + err.Error())
	}
	return Public(p.PublicKey().Bytes())
}

// IsZero reports, in constant time, whether k is all zeros: no key.
func (k Private) IsZero() bool {
	var zero [Size]byte
	return subtle.ConstantTimeCompare(k.k[:], zero[:]) == 1
}

// Equal reports, in constant time, whether k and o are the same key.
func (k Private) Equal(o Private) bool { return subtle.ConstantTimeCompare(k.k[:], o.k[:]) == 1 }

// Reveal returns the raw key.
func (k Private) Reveal() [Size]byte { return k.k }

// RevealBase64 returns the standard base64 form ParsePrivate reads.
func (k Private) RevealBase64() string { return base64.StdEncoding.EncodeToString(k.k[:]) }

// RevealHex returns the lowercase hex form WireGuard's UAPI takes
// (private_key=...).
func (k Private) RevealHex() string { return hex.EncodeToString(k.k[:]) }

// SealTo encrypts and authenticates cleartext for p with NaCl box:
// a random 24-byte nonce followed by the box. OpenFrom undoes it.
func (k Private) SealTo(p Public, cleartext []byte) []byte {
	var nonce [24]byte
	_, _ = rand.Read(nonce[:]) // never fails
	pk := [Size]byte(p)
	return box.Seal(nonce[:], cleartext, &nonce, &pk, &k.k)
}

// OpenFrom opens what p sealed to k with SealTo; false means it was not
// sealed by p for k, or was changed on the way.
func (k Private) OpenFrom(p Public, ciphertext []byte) ([]byte, bool) {
	if len(ciphertext) < 24+box.Overhead {
		return nil, false
	}
	nonce := [24]byte(ciphertext[:24])
	pk := [Size]byte(p)
	return box.Open(nil, ciphertext[24:], &nonce, &pk, &k.k)
}

// String returns a placeholder, never the key.
func (k Private) String() string { return redacted }

// GoString returns a placeholder for %#v, never the key.
func (k Private) GoString() string { return redacted }

// Format prints the placeholder for every verb, so %x, %d and %+v do not
// reach the bytes either.
func (k Private) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue implements slog.LogValuer with the placeholder.
func (k Private) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText fails with ErrNotMarshaled: encoding a struct that holds a
// private key is a mistake to stop, not to write out.
func (k Private) MarshalText() ([]byte, error) { return nil, ErrNotMarshaled }

var (
	_ fmt.Formatter  = Private{}
	_ fmt.GoStringer = Private{}
	_ slog.LogValuer = Private{}
)
