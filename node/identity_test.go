package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
)

// The key pair in testdata/credentials-v1.json.
const (
	goldenPriv = "KAirxhrgPmtRo5yhPIB6Kq35QHV4JLgshwU5ya2E1Hc="
	goldenPub  = "1wNLXk6SC1Oiy7pwIkcnmjpYg27h6pq/Su+v1dU3n14="
)

// TestCredentialsWrittenByOldCodeLoad: testdata/credentials-v1.json was
// written by FileCredentials.Save when the private key was a raw
// [32]byte. It still loads, and saving it again writes the same bytes.
func TestCredentialsWrittenByOldCodeLoad(t *testing.T) {
	golden, err := os.ReadFile("testdata/credentials-v1.json")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(path, golden, 0o600))

	fc := &FileCredentials{Path: path}
	id, err := fc.Load()
	require.NoError(t, err)
	want, err := key.ParsePrivate(goldenPriv)
	require.NoError(t, err)
	assert.True(t, want.Equal(id.Private))
	assert.Equal(t, goldenPub, id.PublicKey().String())
	assert.Equal(t, "web-1", id.Name)
	assert.Equal(t, "nabcdefghijklmnop", id.NodeID)
	assert.Equal(t, netip.MustParsePrefix("100.64.12.34/10"), id.Address)

	require.NoError(t, fc.Save(id))
	again, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(golden), string(again))
}

// TestIdentityNotPrinted: printing or logging an identity shows its name
// and public key, never its private key.
func TestIdentityNotPrinted(t *testing.T) {
	priv, err := key.ParsePrivate(goldenPriv)
	require.NoError(t, err)
	id := newIdentity("web-1", priv)
	id.NodeID, id.Address = "nabc", netip.MustParsePrefix("100.64.1.2/10")

	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x"} {
		out = append(out, fmt.Sprintf(verb, id), fmt.Sprintf(verb, *id))
	}
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var b bytes.Buffer
		slog.New(h(&b)).Info("identity", "id", id, "value", *id)
		out = append(out, b.String())
	}
	_, err = json.Marshal(id)
	require.ErrorIs(t, err, key.ErrNotMarshaled, "an identity is encoded only as a credentials file")

	raw := priv.Reveal()
	for _, o := range out {
		assert.Contains(t, o, goldenPub)
		assert.Contains(t, o, "web-1")
		for _, secret := range []string{goldenPriv, priv.RevealHex(), strings.ToUpper(priv.RevealHex()), fmt.Sprint(raw), fmt.Sprintf("%#v", raw)} {
			assert.NotContains(t, o, secret)
		}
	}
	assert.Equal(t, "{Name:web-1 PublicKey:"+goldenPub+" NodeID:nabc Address:100.64.1.2/10}", fmt.Sprintf("%+v", id))
}

// TestCredentialsBadKeyNotQuoted: a damaged private key in the file is
// reported without echoing it.
func TestCredentialsBadKeyNotQuoted(t *testing.T) {
	for _, tc := range []struct {
		name, key, wantErr string
	}{
		{"not base64", goldenPriv[:40] + "!!!=", "private_key: private key is not base64: illegal base64 data at input byte 40"},
		{"short", goldenPriv[:40], "private_key: private key is 30 bytes, want 32"},
		{"zero", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "hold no private key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "node.json")
			require.NoError(t, os.WriteFile(path, []byte(`{"version":1,"name":"x","private_key":"`+tc.key+`"}`), 0o600))
			_, err := (&FileCredentials{Path: path}).Load()
			require.ErrorContains(t, err, tc.wantErr)
			assert.Contains(t, err.Error(), path)
			assert.NotContains(t, err.Error(), tc.key[:20])
		})
	}
}

// TestCredentialsKeepControlKey: the credentials file keeps control's
// register key (public, hex) beside the identity; one that does not parse
// is left out, never fatal: it only saves a round trip.
func TestCredentialsKeepControlKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cred.json")
	s := OpenCredentials(path)
	id, _, err := LoadOrCreate(s, "laptop")
	require.NoError(t, err)
	id.ControlKey = key.NewPrivate().Public()
	require.NoError(t, s.Save(id))
	got, err := s.Load()
	require.NoError(t, err)
	assert.Equal(t, id.ControlKey, got.ControlKey)

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	bad := strings.Replace(string(b), id.ControlKey.Hex(), "not-a-key", 1)
	require.NotEqual(t, string(b), bad)
	require.NoError(t, os.WriteFile(path, []byte(bad), 0o600))
	got, err = s.Load()
	require.NoError(t, err, "an unusable control key is not fatal")
	assert.True(t, got.ControlKey.IsZero())
	assert.Equal(t, id.Private, got.Private)
}
