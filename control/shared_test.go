package control

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// sharedPair starts two control instances, each with its own NATS for
// nodes, sharing one KV registry (a's JetStream): a and b are the given
// configs with the test token, the bucket and the servers filled in.
func sharedPair(t testing.TB, a, b Config) (*Server, *Server) {
	t.Helper()
	a.Tokens, a.KVBucket = []JoinToken{{Value: testToken}}, "shared"
	a.EmbeddedNATS = &EmbeddedNATSConfig{Listen: "127.0.0.1:0", StoreDir: t.TempDir()}
	sa, err := New(t.Context(), a)
	require.NoError(t, err)
	t.Cleanup(func() { sa.Close() })
	kv, err := OpenKVStore(ctxT(t), sa.Conn(), KVOptions{Bucket: "shared"})
	require.NoError(t, err)
	b.Tokens, b.Store = []JoinToken{{Value: testToken}}, kv
	b.EmbeddedNATS = &EmbeddedNATSConfig{Listen: "127.0.0.1:0"}
	sb, err := New(t.Context(), b)
	require.NoError(t, err)
	t.Cleanup(func() { sb.Close() })
	return sa, sb
}

// TestTwoControlsShareRegistry: two control instances, each with its own
// NATS for nodes, share one KV registry. A node registered on one is
// accepted by the other, a challenge from one is answered to the other,
// signals cross, and a deregistration on one revokes the node on both
// (finding 9).
func TestTwoControlsShareRegistry(t *testing.T) {
	ctx := ctxT(t)
	a, b := sharedPair(t,
		Config{RelayToken: func(k key.Public, _ time.Time) (string, error) { return "from-a:" + k.String(), nil }},
		Config{RelayToken: func(k key.Public, _ time.Time) (string, error) { return "from-b:" + k.String(), nil }})
	onB := func(c controlapi.NATSCreds) controlapi.NATSCreds { c.URL = b.NATS().URL(); return c }

	// Registered on A, after B started: B accepts its credentials.
	x, err := controlapi.RegisterNATS(ctx, netx.OS, a.NATS().URL(), controlapi.Join{Token: testToken, Name: "x", Key: newPriv(t)})
	require.NoError(t, err)
	got := make(chan string, 1)
	sx, err := controlapi.Connect(ctx, netx.OS, x.NodeID, onB(x.NATS), controlapi.Handlers{Signal: func(from string, p []byte) { got <- from + ":" + string(p) }})
	require.NoError(t, err, "B accepts a node A registered")
	defer sx.Close()
	tok, err := sx.RelayToken(ctx)
	require.NoError(t, err)
	assert.Contains(t, tok, "from-b:")

	// A challenge issued by B, answered to A.
	yKey := newPriv(t)
	first, err := ask(t, joinConn(t, b.NATS().URL()), controlapi.RegisterRequest{Token: testToken, Name: "y", PublicKey: yKey.Public()})
	require.NoError(t, err)
	proof, err := controlapi.ProveKey(yKey, first.Challenge, "y")
	require.NoError(t, err)
	y, err := ask(t, joinConn(t, a.NATS().URL()), controlapi.RegisterRequest{Token: testToken, Name: "y", PublicKey: yKey.Public(), Challenge: first.Challenge, Proof: proof})
	require.NoError(t, err, "A verifies B's challenge")
	require.NotEmpty(t, y.NodeID)

	// y, registered on A, signals x through B, which must know both.
	sy, err := controlapi.Connect(ctx, netx.OS, y.NodeID, onB(y.NATS), controlapi.Handlers{})
	require.NoError(t, err)
	require.NoError(t, sy.Signal(ctx, x.NodeID, []byte("offer")))
	select {
	case m := <-got:
		assert.Equal(t, y.NodeID+":offer", m)
	case <-ctx.Done():
		t.Fatal("no signal through B")
	}
	require.NoError(t, sy.Presence(ctx, true, y.Epoch), "B knows y for presence too")

	// Deregistered through B: A refuses the credentials.
	require.NoError(t, sy.Deregister(ctx))
	sy.Close()
	_, err = controlapi.Connect(ctx, netx.OS, y.NodeID, y.NATS, controlapi.Handlers{})
	require.Error(t, err, "A refuses a node deregistered on B")
}
