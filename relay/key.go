package relay

import (
	"encoding/base64"
	"fmt"
)

// KeySize is the length of a node key: a WireGuard (Curve25519) public key.
const KeySize = 32

// Key identifies a node on the relay: its WireGuard public key. The relay
// forwards by Key and never looks inside the packets it forwards.
type Key [KeySize]byte

// ParseKey parses the standard base64 form WireGuard prints (44
// characters).
func ParseKey(s string) (Key, error) {
	var k Key
	if len(s) != base64.StdEncoding.EncodedLen(KeySize) {
		return k, fmt.Errorf("relay: parse key: %d characters, want %d", len(s), base64.StdEncoding.EncodedLen(KeySize))
	}
	n, err := base64.StdEncoding.Decode(k[:], []byte(s))
	if err != nil {
		return Key{}, fmt.Errorf("relay: parse key: %w", err)
	}
	if n != KeySize {
		return Key{}, fmt.Errorf("relay: parse key: decoded %d bytes, want %d", n, KeySize)
	}
	return k, nil
}

// String returns the standard base64 form, as WireGuard prints keys.
func (k Key) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// ShortString returns the first 8 base64 characters, for logs.
func (k Key) ShortString() string { return "[" + k.String()[:8] + "]" }

// IsZero reports whether k is the zero key, which no node has.
func (k Key) IsZero() bool { return k == Key{} }
