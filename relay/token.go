package relay

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/latticelab/lattice/key"
)

// This file is what control imports to issue relay tokens; it depends on
// nothing but the standard library.

// Token is a relay token: proof, issued by control, that a node key may use
// the relay until an expiry. It is printable (unpadded base64url) so control
// can hand it out in JSON. Layout of the decoded bytes (docs/LRP.md):
//
//	version u8 (1) | key [32] | expiry i64 BE, Unix seconds | HMAC-SHA256 [32]
//
// The MAC covers tokenLabel, version, key and expiry, keyed with the secret
// control and the relay share.
//
// A token binds a key and an expiry, nothing else: whoever holds it can
// register that key on the relay until it expires, and so receive the
// traffic other nodes relay to that key (WireGuard-encrypted, so readable by
// nobody without the node's private key, but deniable to the real node).
// Tokens are therefore short-lived secrets; see "Replay" in docs/LRP.md.
type Token string

const (
	// TokenVersion is the token layout IssueToken writes and VerifyToken
	// accepts.
	TokenVersion = 1
	// MinSecretSize is the shortest secret VerifyToken accepts.
	MinSecretSize = 32

	tokenRawLen = 1 + key.Size + 8 + sha256.Size
	// tokenLabel separates relay-token MACs from anything else the same
	// secret might ever sign.
	tokenLabel = "lattice relay token" //nolint:gosec // a MAC label, not a credential
)

// tokenLen is the length of an encoded Token.
var tokenLen = base64.RawURLEncoding.EncodedLen(tokenRawLen)

// IssueToken returns a token that lets key use the relay until expiry
// (truncated to the second). secret must be at least MinSecretSize bytes;
// a token issued with a shorter one never verifies.
func IssueToken(secret []byte, pub key.Public, expiry time.Time) Token {
	var raw [tokenRawLen]byte
	raw[0] = TokenVersion
	copy(raw[1:], pub[:])
	binary.BigEndian.PutUint64(raw[1+key.Size:], uint64(expiry.Unix()))
	mac := tokenMAC(secret, raw[:1+key.Size+8])
	copy(raw[1+key.Size+8:], mac)
	return Token(base64.RawURLEncoding.EncodeToString(raw[:]))
}

// VerifyToken checks tok against secret and returns the key it was issued
// for. It fails with ErrWeakSecret, ErrTokenMalformed, ErrTokenInvalid (MAC
// mismatch, compared in constant time) or, for a genuine token whose expiry
// is not after now, ErrTokenExpired. The MAC is checked before the expiry,
// so a forged token is never reported as merely expired.
func VerifyToken(secret []byte, tok Token, now time.Time) (key.Public, error) {
	if len(secret) < MinSecretSize {
		return key.Public{}, fmt.Errorf("relay: verify token: %d-byte secret: %w", len(secret), ErrWeakSecret)
	}
	raw, err := decodeToken(tok)
	if err != nil {
		return key.Public{}, fmt.Errorf("relay: verify token: %w", err)
	}
	want := tokenMAC(secret, raw[:1+key.Size+8])
	if !hmac.Equal(want, raw[1+key.Size+8:]) {
		return key.Public{}, fmt.Errorf("relay: verify token: %w", ErrTokenInvalid)
	}
	pub := key.Public(raw[1 : 1+key.Size])
	expiry := time.Unix(int64(binary.BigEndian.Uint64(raw[1+key.Size:])), 0)
	if !now.Before(expiry) {
		return key.Public{}, fmt.Errorf("relay: verify token for %s: expired at %s: %w", pub.ShortString(), expiry.UTC().Format(time.RFC3339), ErrTokenExpired)
	}
	return pub, nil
}

// InspectToken returns the key and expiry a token claims, without
// verifying it (that takes the secret): a client reads its own token's
// expiry to renew it in time. It fails with ErrTokenMalformed.
func InspectToken(tok Token) (pub key.Public, expiry time.Time, err error) {
	raw, err := decodeToken(tok)
	if err != nil {
		return key.Public{}, time.Time{}, fmt.Errorf("relay: inspect token: %w", err)
	}
	pub = key.Public(raw[1 : 1+key.Size])
	return pub, time.Unix(int64(binary.BigEndian.Uint64(raw[1+key.Size:])), 0), nil
}

// decodeToken checks a token's length, encoding and version.
func decodeToken(tok Token) (raw [tokenRawLen]byte, err error) {
	if len(tok) != tokenLen {
		return raw, fmt.Errorf("%d characters, want %d: %w", len(tok), tokenLen, ErrTokenMalformed)
	}
	n, err := base64.RawURLEncoding.Decode(raw[:], []byte(tok))
	if err != nil || n != tokenRawLen {
		return raw, fmt.Errorf("bad encoding: %w", ErrTokenMalformed)
	}
	if raw[0] != TokenVersion {
		return raw, fmt.Errorf("version %d, want %d: %w", raw[0], TokenVersion, ErrTokenMalformed)
	}
	return raw, nil
}

func tokenMAC(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(tokenLabel))
	m.Write(body)
	return m.Sum(nil)
}
