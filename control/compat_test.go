package control

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// goldenPub is the public key in testdata/registry-v1.json.
const goldenPub = "1wNLXk6SC1Oiy7pwIkcnmjpYg27h6pq/Su+v1dU3n14="

// TestRegistryWrittenByOldCodeLoads: testdata/registry-v1.json was written
// by the FileStore of the code before key.Public, when control's key type
// was a bare [32]byte.
// It still loads, and rewriting it (a snapshot after a journaled update)
// yields the same bytes.
func TestRegistryWrittenByOldCodeLoads(t *testing.T) {
	golden, err := os.ReadFile("testdata/registry-v1.json")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "registry.json")
	require.NoError(t, os.WriteFile(path, golden, 0o600))

	st, err := OpenFileStore(path)
	require.NoError(t, err)
	n, err := st.Get(t.Context(), "nabcdefghijklmnop")
	require.NoError(t, err)
	want, err := key.ParsePublic(goldenPub)
	require.NoError(t, err)
	assert.Equal(t, want, n.PublicKey)
	assert.Equal(t, "web-1", n.Name)
	assert.Equal(t, netip.MustParsePrefix("100.64.12.34/10"), n.Address)
	assert.Equal(t, time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC), n.Registered)

	require.NoError(t, st.Update(t.Context(), n))
	require.NoError(t, st.Compact(), "the journaled update, written as a snapshot")
	again, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(golden), string(again))
}

// TestWireKeyForm: keys travel in the API as the standard base64 text
// control's old [32]byte key type wrote.
func TestWireKeyForm(t *testing.T) {
	pub, err := key.ParsePublic(goldenPub)
	require.NoError(t, err)
	b, err := json.Marshal(controlapi.RegisterRequest{Token: "t", Name: "web-1", PublicKey: pub})
	require.NoError(t, err)
	assert.Equal(t, `{"token":"t","name":"web-1","public_key":"`+goldenPub+`"}`, string(b))
	b, err = json.Marshal(controlapi.Peer{NodeID: "n1", Name: "web-1", PublicKey: pub, Address: netip.MustParsePrefix("100.64.12.34/10")})
	require.NoError(t, err)
	assert.Equal(t, `{"node_id":"n1","name":"web-1","public_key":"`+goldenPub+`","address":"100.64.12.34/10"}`, string(b))
}

// TestChallengeWireForm pins the proof-of-key fields on the wire: nodes
// and control of one release must agree on them.
func TestChallengeWireForm(t *testing.T) {
	pub, err := key.ParsePublic(goldenPub)
	require.NoError(t, err)
	c := &controlapi.Challenge{Key: pub, Nonce: make([]byte, 16), Expires: 1_800_000_000_000}
	b, err := json.Marshal(controlapi.RegisterRequest{Token: "t", Name: "web-1", PublicKey: pub, Challenge: c, Proof: make([]byte, 32)})
	require.NoError(t, err)
	assert.Equal(t, `{"token":"t","name":"web-1","public_key":"`+goldenPub+`",`+
		`"challenge":{"key":"`+goldenPub+`","nonce":"AAAAAAAAAAAAAAAAAAAAAA==","expires":1800000000000},`+
		`"proof":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}`, string(b))
	b, err = json.Marshal(controlapi.RegisterResponse{Challenge: c, Peers: []controlapi.Peer{}})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"challenge":{"key":"`+goldenPub+`"`)
	b, err = json.Marshal(controlapi.PeerPage{Peers: []controlapi.Peer{}, More: true})
	require.NoError(t, err)
	assert.Equal(t, `{"peers":[],"more":true}`, string(b))
}
