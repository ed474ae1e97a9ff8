// Package key holds a node's WireGuard (X25519) keys: Public, which prints,
// compares and travels as text, and Private, which never prints itself and
// compares in constant time. It imports nothing of ours, so every package
// can use it.
package key

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
)

// Size is the length of a key in bytes.
const Size = 32

// Public is a node's WireGuard public key. Its text form is the standard
// base64 that `wg pubkey` prints, which is how it travels in the control
// API, the registry and the credentials file.
//
// Its underlying type is a byte array so that wire formats can copy it in
// and out without ceremony; a Private cannot be converted to it.
type Public [Size]byte

// ParsePublic parses the standard base64 form.
func ParsePublic(s string) (Public, error) {
	var k Public
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return k, fmt.Errorf("public key %q is not base64: %w", truncate(s, 60), err)
	}
	if len(b) != Size {
		return k, fmt.Errorf("public key is %d bytes, want %d", len(b), Size)
	}
	return Public(b), nil
}

// ParsePublicHex parses the lowercase hex form of WireGuard's UAPI
// (public_key=...).
func ParsePublicHex(s string) (Public, error) {
	var k Public
	b, err := hex.DecodeString(s)
	if err != nil {
		return k, fmt.Errorf("public key %q is not hex: %w", truncate(s, 80), err)
	}
	if len(b) != Size {
		return k, fmt.Errorf("public key is %d bytes, want %d", len(b), Size)
	}
	return Public(b), nil
}

// String returns the standard base64 form.
func (k Public) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// ShortString returns the first 8 base64 characters in brackets, for logs.
func (k Public) ShortString() string { return "[" + k.String()[:8] + "]" }

// Hex returns the lowercase hex form WireGuard's UAPI uses.
func (k Public) Hex() string { return hex.EncodeToString(k[:]) }

// IsZero reports whether k is all zeros: no key.
func (k Public) IsZero() bool { return k == Public{} }

// MarshalText implements encoding.TextMarshaler with the base64 form.
func (k Public) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParsePublic.
func (k *Public) UnmarshalText(b []byte) error {
	p, err := ParsePublic(string(b))
	if err != nil {
		return err
	}
	*k = p
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
