package control

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/netx"
)

// TestRegistrationDoesNotScan: once control started, registering,
// re-registering, listing peers by page and deregistering never list the
// whole registry.
func TestRegistrationDoesNotScan(t *testing.T) {
	ctx := ctxT(t)
	st := &countingStore{FileStore: NewMemStore()}
	env := startServer(t, "", func(c *Config) { c.Store = st })
	require.Equal(t, int64(1), st.lists.Load(), "one List at startup, to load the view")
	var resps []*controlapi.RegisterResponse
	for _, name := range []string{"a", "b", "c"} {
		r, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: name, Key: newPriv(t)})
		require.NoError(t, err)
		resps = append(resps, r)
	}
	assert.Len(t, resps[2].Peers, 2, "the third node's answer carries the first two")
	s, err := controlapi.Connect(ctx, netx.OS, resps[0].NodeID, resps[0].NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer s.Close()
	peers, err := s.Peers(ctx)
	require.NoError(t, err)
	assert.Len(t, peers, 2)
	require.NoError(t, s.Deregister(ctx))
	assert.Equal(t, int64(1), st.lists.Load(), "no List after startup")
}

// TestSharedPeerEvents: a change reaches every current node as one
// message on SubjectPeerEvents, and an older node that did not ask for
// shared events still gets its own copy on its LeafPeers subject.
func TestSharedPeerEvents(t *testing.T) {
	ctx := ctxT(t)
	env := startServer(t, "")
	type got struct {
		mu  sync.Mutex
		evs []controlapi.PeerEvent
	}
	var current [2]got
	for i := range current {
		r, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: []string{"cur-a", "cur-b"}[i], Key: newPriv(t)})
		require.NoError(t, err)
		require.Equal(t, controlapi.SubjectPeerEvents, r.NATS.Events, "control offers the shared events")
		g := &current[i]
		s, err := controlapi.Connect(ctx, netx.OS, r.NodeID, r.NATS, controlapi.Handlers{Peer: func(ev controlapi.PeerEvent) {
			g.mu.Lock()
			g.evs = append(g.evs, ev)
			g.mu.Unlock()
		}})
		require.NoError(t, err)
		defer s.Close()
	}
	// An older client: no SharedEvents, subscribed to its own subject.
	oldKey := newPriv(t)
	jc := joinConn(t, env.url)
	first, err := ask(t, jc, controlapi.RegisterRequest{Token: testToken, Name: "old", PublicKey: oldKey.Public()})
	require.NoError(t, err)
	proof, err := controlapi.ProveKey(oldKey, first.Challenge, "old")
	require.NoError(t, err)
	old, err := ask(t, jc, controlapi.RegisterRequest{Token: testToken, Name: "old", PublicKey: oldKey.Public(), Challenge: first.Challenge, Proof: proof})
	require.NoError(t, err)
	assert.Empty(t, old.NATS.Events, "no shared events for a node that did not ask")
	oc, err := nats.Connect(old.NATS.URL, nats.UserInfo(old.NATS.User, old.NATS.Password), nats.CustomInboxPrefix(old.NATS.Inbox))
	require.NoError(t, err)
	defer oc.Close()
	oldEvents, err := oc.SubscribeSync(controlapi.NodeSubject(old.NodeID, controlapi.LeafPeers))
	require.NoError(t, err)
	require.NoError(t, oc.Flush())

	before := env.srv.Conn().Stats().OutMsgs
	_, err = controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "newcomer", Key: newPriv(t)})
	require.NoError(t, err)
	m, err := oldEvents.NextMsg(5 * time.Second)
	require.NoError(t, err, "the older node gets its own copy")
	var ev controlapi.PeerEvent
	require.NoError(t, json.Unmarshal(m.Data, &ev))
	assert.Equal(t, "newcomer", ev.Peer.Name)
	for i := range current {
		g := &current[i]
		require.Eventually(t, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, ev := range g.evs {
				if ev.Type == controlapi.PeerAdded && ev.Peer.Name == "newcomer" {
					return true
				}
			}
			return false
		}, 5*time.Second, 5*time.Millisecond, "current node %d hears the newcomer once", i)
		g.mu.Lock()
		for _, ev := range g.evs {
			assert.NotEqual(t, []string{"cur-a", "cur-b"}[i], ev.Peer.Name, "a node is not told about itself")
		}
		g.mu.Unlock()
	}
	// Two registration replies (challenge, answer), one shared event, one
	// copy for the older node: not one per node.
	assert.Equal(t, uint64(4), env.srv.Conn().Stats().OutMsgs-before)
}

// TestKVClaimsUnderRace: many registrations racing for one name on two
// instances sharing a bucket: exactly one wins, and the registry holds
// one name claim and one address claim per node.
func TestKVClaimsUnderRace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := New(t.Context(), Config{
		Tokens: []JoinToken{{Value: testToken}}, KVBucket: "race",
		EmbeddedNATS: &EmbeddedNATSConfig{Listen: "127.0.0.1:0", StoreDir: t.TempDir()},
	})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	kv, err := OpenKVStore(ctx, a.Conn(), KVOptions{Bucket: "race"})
	require.NoError(t, err)
	b, err := New(t.Context(), Config{Tokens: []JoinToken{{Value: testToken}}, Store: kv, EmbeddedNATS: &EmbeddedNATSConfig{Listen: "127.0.0.1:0"}})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	var wg sync.WaitGroup
	var won atomic.Int64
	for i := range 16 {
		url := a.NATS().URL()
		if i%2 == 1 {
			url = b.NATS().URL()
		}
		wg.Go(func() {
			if _, err := controlapi.RegisterNATS(ctx, netx.OS, url, controlapi.Join{Token: testToken, Name: "contested", Key: newPriv(t)}); err == nil {
				won.Add(1)
			} else {
				assert.Contains(t, err.Error(), controlapi.CodeNameTaken)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(1), won.Load(), "one node gets the name")
	nodes, err := kv.List(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	keys, err := kv.kv.ListKeys(ctx)
	require.NoError(t, err)
	var claims []string
	for k := range keys.Keys() {
		if k != controlSecretKey && k != "node."+nodes[0].ID {
			claims = append(claims, k)
		}
	}
	assert.ElementsMatch(t, []string{addrKey(nodes[0]), nameKey(nodes[0])}, claims, "losers left no claim behind")
}
