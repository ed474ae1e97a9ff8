package controlapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

const token = "join-token-0123456789abcdef"

// startControl starts a control server with embedded NATS on loopback
// and returns its NATS URL.
func startControl(t *testing.T) string {
	t.Helper()
	srv, err := control.New(t.Context(), control.Config{
		Tokens:       []control.JoinToken{{Value: token}},
		Store:        control.NewMemStore(),
		EmbeddedNATS: &control.EmbeddedNATSConfig{Listen: "127.0.0.1:0"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv.NATS().URL()
}

// register registers a new key as name over NATS at url.
func register(ctx context.Context, t *testing.T, url, name string) *controlapi.RegisterResponse {
	t.Helper()
	r, err := controlapi.RegisterNATS(ctx, netx.OS, url, controlapi.Join{Token: token, Name: name, Key: key.NewPrivate()})
	require.NoError(t, err)
	return r
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestConnectPeers: ConnectPeers asks the peer list right behind the subscriptions instead
// of flushing: the list's answer says they are in place, so a peer that
// registers after it is announced to the session. The session logs in on
// a connection a Predialer dialed.
func TestConnectPeers(t *testing.T) {
	url := startControl(t)
	ctx := ctxT(t)
	a, b := register(ctx, t, url, "alpha"), register(ctx, t, url, "beta")

	events := make(chan controlapi.PeerEvent, 4)
	n := &controlapi.CountingNet{Network: netx.OS}
	pre := controlapi.NewPredialer(n, url)
	defer pre.Close()
	pre.Start()
	<-pre.Dialed() // the server's INFO waits in the connection
	s, peers, err := controlapi.ConnectPeers(ctx, pre, a.NodeID, a.NATS, controlapi.Handlers{Peer: func(ev controlapi.PeerEvent) { events <- ev }})
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, int32(1), n.Dials(), "the session logged in on the connection dialed ahead")
	require.NotNil(t, peers)
	require.Len(t, peers.Peers, 1)
	assert.Equal(t, b.NodeID, peers.Peers[0].NodeID)

	c := register(ctx, t, url, "gamma")
	select {
	case ev := <-events:
		assert.Equal(t, controlapi.PeerAdded, ev.Type)
		assert.Equal(t, c.NodeID, ev.Peer.NodeID)
	case <-ctx.Done():
		t.Fatal("alpha never heard of gamma")
	}
}
