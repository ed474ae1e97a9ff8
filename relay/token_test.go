package relay

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
)

func TestToken(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	pub := key.Public{1, 2, 3}
	valid := IssueToken(testSecret, pub, now.Add(time.Minute))
	raw, err := base64.RawURLEncoding.DecodeString(string(valid))
	require.NoError(t, err)
	reencode := func(mutate func([]byte)) Token {
		b := append([]byte(nil), raw...)
		mutate(b)
		return Token(base64.RawURLEncoding.EncodeToString(b))
	}
	otherSecret := []byte(strings.Repeat("x", MinSecretSize))

	tests := []struct {
		name    string
		secret  []byte
		tok     Token
		now     time.Time
		wantErr error
	}{
		{name: "valid", secret: testSecret, tok: valid, now: now},
		{name: "valid one second before expiry", secret: testSecret, tok: valid, now: now.Add(59 * time.Second)},
		{name: "expired at expiry", secret: testSecret, tok: valid, now: now.Add(time.Minute), wantErr: ErrTokenExpired},
		{name: "expired", secret: testSecret, tok: valid, now: now.Add(time.Hour), wantErr: ErrTokenExpired},
		{name: "other secret", secret: otherSecret, tok: valid, now: now, wantErr: ErrTokenInvalid},
		{name: "forged with other secret", secret: testSecret, tok: IssueToken(otherSecret, pub, now.Add(time.Hour)), now: now, wantErr: ErrTokenInvalid},
		{name: "key altered", secret: testSecret, tok: reencode(func(b []byte) { b[1] ^= 1 }), now: now, wantErr: ErrTokenInvalid},
		{name: "expiry extended", secret: testSecret, tok: reencode(func(b []byte) { b[1+key.Size] ^= 0x10 }), now: now, wantErr: ErrTokenInvalid},
		{name: "mac altered", secret: testSecret, tok: reencode(func(b []byte) { b[len(b)-1] ^= 1 }), now: now, wantErr: ErrTokenInvalid},
		{name: "forged expired token is invalid, not expired", secret: testSecret, tok: reencode(func(b []byte) { b[len(b)-1] ^= 1 }), now: now.Add(time.Hour), wantErr: ErrTokenInvalid},
		{name: "unknown version", secret: testSecret, tok: reencode(func(b []byte) { b[0] = 2 }), now: now, wantErr: ErrTokenMalformed},
		{name: "truncated", secret: testSecret, tok: valid[:len(valid)-1], now: now, wantErr: ErrTokenMalformed},
		{name: "too long", secret: testSecret, tok: valid + "A", now: now, wantErr: ErrTokenMalformed},
		{name: "empty", secret: testSecret, tok: "", now: now, wantErr: ErrTokenMalformed},
		{name: "not base64", secret: testSecret, tok: Token(strings.Repeat("*", len(valid))), now: now, wantErr: ErrTokenMalformed},
		{name: "weak secret", secret: testSecret[:MinSecretSize-1], tok: valid, now: now, wantErr: ErrWeakSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := VerifyToken(tt.secret, tt.tok, tt.now)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Zero(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, pub, got)
		})
	}
}

func TestTokenIsPrintableAndBounded(t *testing.T) {
	tok := IssueToken(testSecret, key.Public{9}, time.Now())
	assert.Len(t, tok, tokenLen)
	assert.LessOrEqual(t, len(tok), MaxTokenSize)
	assert.NotContains(t, string(tok), "=")
	assert.NotContains(t, string(tok), "/")
}

// TestTokenWrittenByOldCode: a token the code before key.Public issued
// (when relay's key type was a bare [32]byte) is the one issued today, and
// verifies to its key.
func TestTokenWrittenByOldCode(t *testing.T) {
	const old = "AdcDS15OkgtTosu6cCJHJ5o6WINu4eqav0rvr9XVN59eAAAAAGs27IAC2NgPzh74y46NAz-8y8v_X-5-_qcv3QQnJodsA5gpyA"
	pub, err := key.ParsePublic("1wNLXk6SC1Oiy7pwIkcnmjpYg27h6pq/Su+v1dU3n14=")
	require.NoError(t, err)
	secret := []byte("0123456789abcdef0123456789abcdef")
	expiry := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	assert.Equal(t, Token(old), IssueToken(secret, pub, expiry))
	got, err := VerifyToken(secret, old, expiry.Add(-time.Hour))
	require.NoError(t, err)
	assert.Equal(t, pub, got)
}
