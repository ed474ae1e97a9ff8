package key

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/nacl/box"
)

// rfc7748 is the X25519 test vector of RFC 7748 section 6.1 (Alice).
var rfc7748 = struct{ priv, pub string }{
	"77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
	"8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a",
}

func mustHex(t *testing.T, s string) [Size]byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	require.Len(t, b, Size)
	return [Size]byte(b)
}

func TestPublicFromPrivate(t *testing.T) {
	priv := PrivateFromRaw(mustHex(t, rfc7748.priv))
	assert.Equal(t, rfc7748.pub, priv.Public().Hex())

	// A key pair the old [32]byte key code derived (curve25519.X25519),
	// as it sits in credentials files today.
	old, err := ParsePrivate("KAirxhrgPmtRo5yhPIB6Kq35QHV4JLgshwU5ya2E1Hc=")
	require.NoError(t, err)
	assert.Equal(t, "1wNLXk6SC1Oiy7pwIkcnmjpYg27h6pq/Su+v1dU3n14=", old.Public().String())
}

func TestNewPrivate(t *testing.T) {
	a, b := NewPrivate(), NewPrivate()
	assert.False(t, a.Equal(b), "two fresh keys are equal")
	for _, k := range []Private{a, b} {
		raw := k.Reveal()
		assert.Zero(t, raw[0]&7, "low bits of byte 0 are clamped")
		assert.Equal(t, byte(64), raw[31]&192, "byte 31 is clamped to 01xxxxxx")
		assert.False(t, k.IsZero())
		assert.False(t, k.Public().IsZero())
	}
}

// secretForms are the ways the bytes of a private key could show up in
// printed or encoded output.
func secretForms(k Private) []string {
	raw := k.Reveal()
	return []string{
		k.RevealBase64(),
		base64.RawStdEncoding.EncodeToString(raw[:]),
		base64.URLEncoding.EncodeToString(raw[:]),
		k.RevealHex(),
		strings.ToUpper(k.RevealHex()),
		fmt.Sprint(raw),         // [40 8 171 ...]
		fmt.Sprintf("%#v", raw), // [32]uint8{0x28, 0x8, ...}
		string(raw[:]),
		k.RevealHex()[:16], // even a prefix
	}
}

func TestPrivateNotPrinted(t *testing.T) {
	k := PrivateFromRaw(mustHex(t, rfc7748.priv))
	type holder struct {
		Name string
		Key  Private
	}
	h := holder{Name: "n", Key: k}

	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T %v"} {
		out = append(out, fmt.Sprintf(verb, k), fmt.Sprintf(verb, &k), fmt.Sprintf(verb, h), fmt.Sprintf(verb, &h))
	}
	out = append(out, k.String(), fmt.Sprint(k), fmt.Sprintln(k, h))

	for _, newHandler := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var b bytes.Buffer
		log := slog.New(newHandler(&b))
		log.Info("key", "key", k, "ptr", &k, "holder", h, "holderptr", &h)
		log.Info("group", slog.Group("g", slog.Any("key", k)))
		out = append(out, b.String())
	}

	for _, v := range []any{k, &k, h, &h, map[string]Private{"k": k}} {
		b, err := json.Marshal(v)
		require.ErrorIs(t, err, ErrNotMarshaled, "json.Marshal(%T)", v)
		out = append(out, string(b), err.Error())
	}

	forms := secretForms(k)
	for _, o := range out {
		for _, f := range forms {
			assert.NotContains(t, o, f)
		}
	}
	assert.Equal(t, "key.Private{redacted}", fmt.Sprintf("%+v", k))
	assert.Equal(t, "{Name:n Key:key.Private{redacted}}", fmt.Sprintf("%+v", h))
}

func TestPrivateEqual(t *testing.T) {
	assert.False(t, reflect.TypeFor[Private]().Comparable(), "Private must not be comparable with ==")

	raw := mustHex(t, rfc7748.priv)
	k := PrivateFromRaw(raw)
	assert.True(t, k.Equal(PrivateFromRaw(raw)))
	for _, i := range []int{0, 15, 31} {
		o := raw
		o[i] ^= 1
		assert.False(t, k.Equal(PrivateFromRaw(o)), "differs in byte %d", i)
	}
	assert.True(t, Private{}.IsZero())
	assert.False(t, k.IsZero())
	var almost [Size]byte
	almost[31] = 1
	assert.False(t, PrivateFromRaw(almost).IsZero())
}

func TestRoundTrips(t *testing.T) {
	priv := NewPrivate()
	pub := priv.Public()

	p, err := ParsePublic(pub.String())
	require.NoError(t, err)
	assert.Equal(t, pub, p)
	p, err = ParsePublicHex(pub.Hex())
	require.NoError(t, err)
	assert.Equal(t, pub, p)
	assert.Len(t, pub.String(), 44)
	assert.Equal(t, "["+pub.String()[:8]+"]", pub.ShortString())

	type msg struct {
		PublicKey Public `json:"public_key"`
	}
	b, err := json.Marshal(msg{pub})
	require.NoError(t, err)
	assert.Equal(t, `{"public_key":"`+pub.String()+`"}`, string(b))
	var m msg
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, pub, m.PublicKey)

	q, err := ParsePrivate(priv.RevealBase64())
	require.NoError(t, err)
	assert.True(t, priv.Equal(q))
	assert.True(t, priv.Equal(PrivateFromRaw(priv.Reveal())))
	assert.Equal(t, hex.EncodeToString(func() []byte { r := priv.Reveal(); return r[:] }()), priv.RevealHex())
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, wantErr string
		parse             func(string) error
	}{
		{"public not base64", "!!!", `public key "!!!" is not base64: illegal base64 data at input byte 0`, parsePub},
		{"public short", "AAAA", "public key is 3 bytes, want 32", parsePub},
		{"public empty", "", "public key is 0 bytes, want 32", parsePub},
		{"public long", base64.StdEncoding.EncodeToString(make([]byte, 33)), "public key is 33 bytes, want 32", parsePub},
		{"public long input truncated", strings.Repeat("!", 100), `public key "` + strings.Repeat("!", 60) + `…" is not base64: illegal base64 data at input byte 0`, parsePub},
		{"public hex odd", "abc", `public key "abc" is not hex: encoding/hex: odd length hex string`, parsePubHex},
		{"public hex bad", "zz", `public key "zz" is not hex: encoding/hex: invalid byte: U+007A 'z'`, parsePubHex},
		{"public hex short", "abcd", "public key is 2 bytes, want 32", parsePubHex},
		{"private not base64", "s3cr3t!!", "private key is not base64: illegal base64 data at input byte 6", parsePriv},
		{"private short", "c2VjcmV0", "private key is 6 bytes, want 32", parsePriv},
		{"private empty", "", "private key is 0 bytes, want 32", parsePriv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse(tc.in)
			require.EqualError(t, err, tc.wantErr)
		})
	}
}

func parsePub(s string) error    { _, err := ParsePublic(s); return err }
func parsePubHex(s string) error { _, err := ParsePublicHex(s); return err }
func parsePriv(s string) error   { _, err := ParsePrivate(s); return err }

func TestUnmarshalTextError(t *testing.T) {
	var m struct {
		PublicKey Public `json:"public_key"`
	}
	err := json.Unmarshal([]byte(`{"public_key":"AAAA"}`), &m)
	require.ErrorContains(t, err, "public key is 3 bytes, want 32")
}

func TestSealOpen(t *testing.T) {
	a, b, c := NewPrivate(), NewPrivate(), NewPrivate()
	sealed := a.SealTo(b.Public(), []byte("hello"))
	got, ok := b.OpenFrom(a.Public(), sealed)
	require.True(t, ok)
	assert.Equal(t, "hello", string(got))

	_, ok = c.OpenFrom(a.Public(), sealed)
	assert.False(t, ok, "opened by a third key")
	_, ok = b.OpenFrom(c.Public(), sealed)
	assert.False(t, ok, "opened as if from another sender")
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	_, ok = b.OpenFrom(a.Public(), tampered)
	assert.False(t, ok, "tampered box opened")
	_, ok = b.OpenFrom(a.Public(), sealed[:24+box.Overhead-1])
	assert.False(t, ok, "short box opened")

	// The layout is nonce || box.Seal, which node's signals use on the wire.
	var nonce [24]byte
	nonce[0] = 7
	pk, sk := [Size]byte(b.Public()), a.Reveal()
	raw := box.Seal(nonce[:], []byte("wire"), &nonce, &pk, &sk)
	got, ok = b.OpenFrom(a.Public(), raw)
	require.True(t, ok)
	assert.Equal(t, "wire", string(got))
}
