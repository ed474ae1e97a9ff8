package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// TestUnsendableAnswerNotStored: a registration whose answer cannot be
// sent (here: over NATS's MaxPayload whatever the paging, because of a
// huge relay list) fails with an error saying so, and leaves nothing in
// the registry (finding 6).
func TestUnsendableAnswerNotStored(t *testing.T) {
	var relays []controlapi.Relay
	for i := range 700 {
		relays = append(relays, controlapi.Relay{Addr: fmt.Sprintf("relay-%03d.%s.example:443", i, strings.Repeat("x", 60))})
	}
	env := startServer(t, "", func(c *Config) { c.Relays = relays })
	ctx := ctxT(t)
	_, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "big", Key: newPriv(t)})
	var e *controlapi.Error
	require.ErrorAs(t, err, &e, "the node is told, not left waiting: %v", err)
	assert.Contains(t, e.Message, "over the 65536 a NATS message may carry")
	nodes, err := env.srv.Store().List(ctx)
	require.NoError(t, err)
	assert.Empty(t, nodes, "nothing stored for an unanswered registration")
}

// TestFailedSendUndone: when the answer is encoded but sending it fails,
// a new node is removed again and a re-registered one keeps its old
// secret.
func TestFailedSendUndone(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	k := newPriv(t)
	old, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "kept", Key: k})
	require.NoError(t, err)
	failing := func([]byte) error { return errors.New("connection lost") }
	for _, tc := range []struct {
		name string
		key  key.Private
	}{{"new", newPriv(t)}, {"kept", k}} {
		req := &controlapi.RegisterRequest{Token: testToken, Name: tc.name, PublicKey: tc.key.Public()}
		req.Challenge, _, err = newChallenge(env.srv.challengeSecret, req.PublicKey, time.Now())
		require.NoError(t, err)
		req.Proof, err = controlapi.ProveKey(tc.key, req.Challenge, tc.name)
		require.NoError(t, err)
		_, err = env.srv.register(ctx, req, failing, admission{})
		require.ErrorContains(t, err, "connection lost")
	}
	nodes, err := env.srv.Store().List(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	s, err := controlapi.Connect(ctx, netx.OS, old.NodeID, old.NATS, controlapi.Handlers{})
	require.NoError(t, err, "the old secret is back")
	s.Close()
}

// TestManyRegistrationsAnswered: registrations past the point where the
// peer list outgrows a NATS message (about 465 nodes) are all answered,
// a first page of peers (at most firstPageBytes) in the answer and the
// rest by page (finding 6).
func TestManyRegistrationsAnswered(t *testing.T) {
	total := 2000
	if raceEnabled || testing.Short() {
		total = 600
	}
	// A long PresenceTTL: expiring 2,000 silent nodes is a storm of its own.
	env := startServer(t, "", func(c *Config) { c.Store, c.PresenceTTL = NewMemStore(), time.Hour })
	nc := joinConn(t, env.url)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var last *controlapi.RegisterResponse
	start := time.Now()
	for i := range total {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := controlapi.RegisterOver(rctx, nc, controlapi.Join{Token: testToken, Name: fmt.Sprintf("n%04d", i), Key: key.NewPrivate()})
		rcancel()
		require.NoError(t, err, "registration %d", i+1)
		last = r
	}
	t.Logf("%d registrations in %v", total, time.Since(start))
	require.Eventually(t, func() bool { return env.srv.Stats().Registered == uint64(total) }, 5*time.Second, 10*time.Millisecond)
	assert.True(t, last.MorePeers)
	assert.Less(t, len(last.Peers), total-1)
	assert.Greater(t, len(last.Peers), 100)
	b, err := json.Marshal(last.Peers)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(b), firstPageBytes, "the first page is bounded, whatever the registry's size")
	s, err := controlapi.Connect(ctx, netx.OS, last.NodeID, last.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer s.Close()
	peers, err := s.Peers(ctx)
	require.NoError(t, err)
	require.Len(t, peers, total-1)
	seen := map[string]bool{last.NodeID: true}
	for _, p := range peers {
		assert.False(t, seen[p.NodeID], "peer %s twice", p.NodeID)
		seen[p.NodeID] = true
	}
	// A node that asks without paging is told why it gets nothing.
	r, err := s.Conn().RequestWithContext(ctx, controlapi.NodeSubject(last.NodeID, controlapi.LeafPeerList), nil)
	require.NoError(t, err)
	var e *controlapi.Error
	require.ErrorAs(t, controlapi.DecodeReply(r.Data, &[]controlapi.Peer{}), &e)
	assert.Contains(t, e.Message, "ask by page")
}

// countingStore counts List calls.
type countingStore struct {
	*FileStore
	lists atomic.Int64
}

func (s *countingStore) List(ctx context.Context) ([]*Node, error) {
	s.lists.Add(1)
	return s.FileStore.List(ctx)
}

// TestMassExpiryListsOnce: nodes that do not come back after control
// restarts expire together, and their offline events cost one listing of
// the registry, not one per node.
func TestMassExpiryListsOnce(t *testing.T) {
	const silent = 50
	st := &countingStore{FileStore: NewMemStore()}
	ctx := ctxT(t)
	for i := range silent {
		k := key.NewPrivate().Public()
		a := Overlay.Addr().As4()
		a[2], a[3] = byte(i>>8), byte(i+1)
		require.NoError(t, st.Create(ctx, &Node{ID: nodeID(k), Name: fmt.Sprintf("s%02d", i), PublicKey: k,
			Address: netip.PrefixFrom(netip.AddrFrom4(a), Overlay.Bits())}))
	}
	const ttl = time.Second
	env := startServer(t, "", func(c *Config) { c.Store, c.PresenceTTL = st, ttl })
	w, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "watcher", Key: newPriv(t)})
	require.NoError(t, err)
	var offline atomic.Int64
	sw, err := controlapi.Connect(ctx, netx.OS, w.NodeID, w.NATS, controlapi.Handlers{Peer: func(ev controlapi.PeerEvent) {
		if ev.Type == controlapi.PeerOffline {
			offline.Add(1)
		}
	}})
	require.NoError(t, err)
	defer sw.Close()
	before := st.lists.Load()
	require.Eventually(t, func() bool { return offline.Load() == silent }, 5*ttl, 10*time.Millisecond, "offline events: %d", offline.Load())
	assert.LessOrEqual(t, st.lists.Load()-before, int64(2), "listings for %d expiries", silent)
}

// failingGetStore fails Get while fail is set, as a registry that cannot
// be reached does.
type failingGetStore struct {
	*FileStore
	fail atomic.Bool
}

func (s *failingGetStore) Get(ctx context.Context, id string) (*Node, error) {
	if s.fail.Load() {
		return nil, errors.New("registry unreachable")
	}
	return s.FileStore.Get(ctx, id)
}

// TestHeartbeatOfALostRecord: a heartbeat of a node the registry has no
// record of is answered not found (the node then registers again); one
// the registry cannot be read for is answered with the failure, not
// "not found", so that a store's passing failure does not send every
// node to register again.
func TestHeartbeatOfALostRecord(t *testing.T) {
	st := &failingGetStore{FileStore: NewMemStore()}
	env := startServer(t, "", func(c *Config) { c.Store = st })
	ctx := ctxT(t)
	r, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "n", Key: newPriv(t)})
	require.NoError(t, err)
	s, err := controlapi.Connect(ctx, netx.OS, r.NodeID, r.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Presence(ctx, true, r.Epoch))

	st.fail.Store(true)
	var e *controlapi.Error
	require.ErrorAs(t, s.Presence(ctx, true, r.Epoch), &e)
	assert.Equal(t, controlapi.CodeInternal, e.Code, "a registry that cannot be read: %v", e)
	assert.Contains(t, e.Message, "registry unreachable")
	st.fail.Store(false)

	require.NoError(t, st.Delete(ctx, r.NodeID))
	require.ErrorAs(t, s.Presence(ctx, true, r.Epoch), &e)
	assert.Equal(t, controlapi.CodeNotFound, e.Code)
}
