package control

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/netx"
)

// TestEventsAndListsCarryRevisions: instances sharing a registry give
// what they publish and answer the registry revision it is as of, so a
// node can put events and lists from different instances in order: an
// event carries its peer's record revision (a removal, the record's it
// removed), a list page the revision its view holds every change up to.
// A page served behind the registry (its watch held past the barrier)
// says so: a node that applied a newer event then keeps that peer.
func TestEventsAndListsCarryRevisions(t *testing.T) {
	ctx := ctxT(t)
	a, b, gate, obs := laggingPair(t, Config{barrierWait: 100 * time.Millisecond})
	kv, ok := a.cfg.Store.(*KVStore)
	require.True(t, ok)
	watcher, events := watchEvents(ctx, t, a.NATS().URL())
	next := func(id string) controlapi.PeerEvent { t.Helper(); return nextAbout(ctx, t, events, id) }
	require.Eventually(t, func() bool { return b.view.has(watcher.NodeID) }, 5*time.Second, time.Millisecond)

	xKey := newPriv(t)
	gate.holding(xKey)
	x, err := controlapi.RegisterNATS(ctx, netx.OS, a.NATS().URL(), controlapi.Join{Token: testToken, Name: "x", Key: xKey})
	require.NoError(t, err)
	_, xRev, err := kv.get(ctx, x.NodeID)
	require.NoError(t, err)
	added := next(x.NodeID)
	assert.Equal(t, controlapi.PeerAdded, added.Type)
	assert.Equal(t, xRev, added.Peer.Rev, "the add names the record's revision")
	reg := kv.registry()
	require.NotZero(t, reg)
	assert.Equal(t, reg, added.Peer.Reg, "the add names the registry its revision counts in")

	behind, err := obs.PeerList(ctx)
	require.NoError(t, err)
	require.NotContains(t, peerIDs(behind.Peers), x.NodeID, "B's watch was held")
	assert.Positive(t, behind.Rev, "a shared registry's list says how current it is")
	assert.Less(t, behind.Rev, xRev, "a list served behind the registry claims x's revision")
	assert.Equal(t, reg, behind.Reg, "a list names the registry its revision counts in")

	gate.open()
	require.Eventually(t, func() bool { return b.view.has(x.NodeID) }, 5*time.Second, time.Millisecond)
	l, err := obs.PeerList(ctx)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, l.Rev, xRev)
	for _, p := range l.Peers {
		if p.NodeID == x.NodeID {
			assert.Equal(t, xRev, p.Rev, "x's entry names its record's revision")
		}
	}

	sx, err := controlapi.Connect(ctx, netx.OS, x.NodeID, x.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer sx.Close()
	require.NoError(t, sx.Deregister(ctx))
	removed := next(x.NodeID)
	for removed.Type != controlapi.PeerRemoved {
		removed = next(x.NodeID)
	}
	assert.Equal(t, xRev, removed.Peer.Rev, "the removal names the record it removed")
	assert.Equal(t, reg, removed.Peer.Reg)
}

// TestRegistryMadeAgainNamesItselfLater: a registry bucket deleted and
// made again numbers its revisions from 1 again; its Reg is larger, so a
// node tells its revisions from the old one's.
func TestRegistryMadeAgainNamesItselfLater(t *testing.T) {
	ctx := ctxT(t)
	srv, err := New(t.Context(), Config{
		Tokens: []JoinToken{{Value: testToken}}, KVBucket: "again",
		EmbeddedNATS: &EmbeddedNATSConfig{Listen: "127.0.0.1:0", StoreDir: t.TempDir()},
	})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	first, err := OpenKVStore(ctx, srv.Conn(), KVOptions{Bucket: "made-again"})
	require.NoError(t, err)
	again, err := OpenKVStore(ctx, srv.Conn(), KVOptions{Bucket: "made-again"})
	require.NoError(t, err)
	assert.Equal(t, first.registry(), again.registry(), "one bucket, opened twice, names itself alike")
	js, err := jetstream.New(srv.Conn())
	require.NoError(t, err)
	require.NoError(t, js.DeleteKeyValue(ctx, "made-again"))
	was := first.registry()
	remade, err := OpenKVStore(ctx, srv.Conn(), KVOptions{Bucket: "made-again"})
	require.NoError(t, err)
	assert.Greater(t, remade.registry(), was)
	// A handle from before, which writes into the new bucket at its
	// revisions, names the new one once it reads the last revision (as
	// every peer list's barrier does).
	_, err = first.lastRevision(ctx)
	require.NoError(t, err)
	assert.Equal(t, remade.registry(), first.registry(), "a handle that outlived the remaking names the old registry")
}

// TestLostReregistrationUndoneInOrder: a node registers again, its answer
// is lost and the update is taken back. The take-back's event names the
// revision it wrote, after the update's: a node that applied the update
// takes the take-back, rather than finding it older and dropping it.
func TestLostReregistrationUndoneInOrder(t *testing.T) {
	ctx := ctxT(t)
	a, _ := sharedPair(t, Config{}, Config{})
	_, events := watchEvents(ctx, t, a.NATS().URL())
	join := controlapi.Join{Token: testToken, Name: "again", Key: newPriv(t)}
	first, err := controlapi.RegisterNATS(ctx, netx.OS, a.NATS().URL(), join)
	require.NoError(t, err)

	require.ErrorIs(t, registerLosingAnswer(ctx, a, join, nil), errLostAnswer)
	var got []controlapi.PeerEvent
	for len(got) < 3 {
		got = append(got, nextAbout(ctx, t, events, first.NodeID))
	}
	require.Equal(t, controlapi.PeerAdded, got[0].Type)
	require.Equal(t, controlapi.PeerUpdated, got[1].Type, "the registration again")
	require.Equal(t, controlapi.PeerUpdated, got[2].Type, "taken back")
	assert.Equal(t, first.Epoch, got[2].Peer.Epoch, "taken back to the first registration")
	assert.Greater(t, got[2].Peer.Rev, got[1].Peer.Rev, "the take-back is older than what it takes back")
}

// TestDeregisterNamesTheRecordItRemoves: a node deregisters through one
// instance while it registers again through another, between the first
// one's read of its record and the delete. The delete takes the record
// it read only; read again, the newer one goes, and the removal names it,
// so nodes that hold the newer record take the removal rather than drop
// it as older.
func TestDeregisterNamesTheRecordItRemoves(t *testing.T) {
	ctx := ctxT(t)
	var again func()
	var once sync.Once
	a, b := sharedPair(t, Config{deregisterHook: func(string) { once.Do(again) }}, Config{})
	kv := a.cfg.Store.(*KVStore)
	_, events := watchEvents(ctx, t, a.NATS().URL())

	join := controlapi.Join{Token: testToken, Name: "p", Key: newPriv(t)}
	p, err := controlapi.RegisterNATS(ctx, netx.OS, a.NATS().URL(), join)
	require.NoError(t, err)
	var newer uint64
	again = func() {
		_, err := controlapi.RegisterNATS(ctx, netx.OS, b.NATS().URL(), join)
		require.NoError(t, err)
		_, newer, err = kv.get(ctx, p.NodeID)
		require.NoError(t, err)
	}
	sp, err := controlapi.Connect(ctx, netx.OS, p.NodeID, p.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer sp.Close()
	require.NoError(t, sp.Deregister(ctx))
	require.NotZero(t, newer, "the registration through b did not run")

	_, err = kv.Get(ctx, p.NodeID)
	require.ErrorIs(t, err, ErrNotFound, "deregistered")
	removed := nextAbout(ctx, t, events, p.NodeID)
	for removed.Type != controlapi.PeerRemoved {
		removed = nextAbout(ctx, t, events, p.NodeID)
	}
	assert.Equal(t, newer, removed.Peer.Rev, "the removal names a record older than the one it removed")
}

// watchEvents registers a node named "watcher" on the control at url and
// returns it and the peer events its session gets, in the order it gets
// them.
func watchEvents(ctx context.Context, t *testing.T, url string) (*controlapi.RegisterResponse, <-chan controlapi.PeerEvent) {
	t.Helper()
	w := mustRegister(ctx, t, url, "watcher")
	events := make(chan controlapi.PeerEvent, 64)
	s, err := controlapi.Connect(ctx, netx.OS, w.NodeID, w.NATS, controlapi.Handlers{Peer: func(ev controlapi.PeerEvent) { events <- ev }})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return w, events
}

// nextAbout is the next of events about node id, the others skipped.
func nextAbout(ctx context.Context, t *testing.T, events <-chan controlapi.PeerEvent, id string) controlapi.PeerEvent {
	t.Helper()
	for {
		select {
		case ev := <-events:
			if ev.Peer.NodeID == id {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("no event about %s", id)
		}
	}
}
