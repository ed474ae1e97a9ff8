package node_test

import (
	"bytes"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/node"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOfflineOnlineConcurrent: a peer's offline and online announcements
// may be applied from two goroutines at once (the session's events and a
// peer list after a reconnect). Whichever is applied last, what the node
// runs and what WireGuard holds agree: an online peer is in WireGuard's
// configuration and an offline one is not.
func TestOfflineOnlineConcurrent(t *testing.T) {
	w := newLabWorld(t)
	n := startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{}, func(c *node.Config) { c.ICE.Lazy = false })
	online := controlapi.Peer{NodeID: "fake", Name: "peer", PublicKey: key.NewPrivate().Public(),
		Address: netip.MustParsePrefix("100.96.0.9/10")}
	offline := online
	offline.Offline = true
	for i := range 200 {
		n.SetPeerForTest(online)
		var wg sync.WaitGroup
		wg.Go(func() { n.SetPeerForTest(offline) })
		wg.Go(func() { n.SetPeerForTest(online) })
		wg.Wait()
		if running, wg := n.PeerCount(), n.WireGuardPeers(); running != wg {
			t.Fatalf("round %d: the node runs %d peers, WireGuard holds %d", i, running, wg)
		}
	}
}

// TestLazinessChanges: a peer that registers again with a new join token
// can gain or lose the tag that makes it always direct, so a node sees
// the same peer lazy (out of WireGuard's configuration until traffic
// flows) and then not, or the other way. After each change WireGuard
// holds what the peer's new standing asks for, even when the old peer's
// restore hook (the first packet to a trimmed peer) fires after it:
// an always-direct peer keeps the persistent keepalive that holds its
// NAT mapping open, and the node counts no trimmed peer it does not have
// (every packet to the overlay is looked up while it counts any).
func TestLazinessChanges(t *testing.T) {
	w := newLabWorld(t)
	n := startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{}, func(c *node.Config) {
		c.ICE.Lazy = true
		c.ICE.AlwaysDirect = []string{node.TagPrefix + "router"}
	})
	// alpha opens the handshake to a peer whose key sorts after its own:
	// that peer gets the keepalive at once when it is not lazy.
	me := n.Identity().Private.Public()
	var pub key.Public
	for {
		pub = key.NewPrivate().Public()
		if bytes.Compare(me[:], pub[:]) < 0 {
			break
		}
	}
	lazy := controlapi.Peer{NodeID: "fake", Name: "peer", PublicKey: pub, Address: netip.MustParsePrefix("100.96.0.9/10")}
	router := lazy
	router.Tags = []string{"router"}

	n.SetPeerForTest(lazy)
	require.Equal(t, 0, n.WireGuardPeers(), "a lazy peer starts trimmed")
	require.Equal(t, int32(1), n.TrimmedCount())
	oldRestore := n.RestoreForTest(lazy.NodeID)

	n.SetPeerForTest(router)
	assert.Equal(t, 1, n.WireGuardPeers(), "an always-direct peer is in WireGuard's configuration")
	assert.Equal(t, int32(0), n.TrimmedCount(), "trimmed peers counted once the peer is always direct")
	oldRestore() // the lazy peer's first packet, a moment late
	assert.Equal(t, 25, n.WireGuardKeepalive(pub), "the always-direct peer's keepalive, after the lazy peer's restore hook ran")
	assert.Equal(t, int32(0), n.TrimmedCount(), "trimmed peers counted after the lazy peer's restore hook ran")

	// Lazy again, and its first packet at once: before or after the
	// peer's actor has started, it stays in WireGuard's configuration.
	idle := func() bool {
		for _, st := range n.Status() {
			if st.Peer.NodeID == lazy.NodeID && st.ICE.State == "idle" && st.Peer.Equal(lazy) {
				return true
			}
		}
		return false
	}
	for round := range 30 {
		n.SetPeerForTest(router)
		n.SetPeerForTest(lazy)
		require.Equal(t, 0, n.WireGuardPeers(), "round %d: the peer, lazy again, is trimmed", round)
		require.Equal(t, int32(1), n.TrimmedCount(), "round %d", round)
		n.RestoreForTest(lazy.NodeID)()
		require.Eventually(t, idle, 5*time.Second, time.Millisecond, "round %d: the lazy peer never went idle", round)
		require.Equal(t, 1, n.WireGuardPeers(), "round %d: the lazy peer's first packet put it back; once idle, it is still there", round)
		require.Equal(t, int32(0), n.TrimmedCount(), "round %d", round)
	}
}

// TestNoTrimAfterTraffic: a lazy peer found idle is trimmed only if no
// handshake went either way since: WireGuard holds a packet read for the
// peer behind the handshake it opens, and taking the peer out would drop
// that packet.
func TestNoTrimAfterTraffic(t *testing.T) {
	w := newLabWorld(t)
	n := startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{}, func(c *node.Config) { c.ICE.Lazy = true })
	peer := controlapi.Peer{NodeID: "fake", Name: "peer", PublicKey: key.NewPrivate().Public(), Address: netip.MustParsePrefix("100.96.0.9/10")}
	n.SetPeerForTest(peer)
	n.RestoreForTest(peer.NodeID)()
	require.Equal(t, 1, n.WireGuardPeers(), "the peer's first packet puts it back")

	idleAt := time.Now()
	n.NoteInitiationForTest(peer.NodeID, idleAt.Add(time.Millisecond))
	assert.False(t, n.TrimForTest(peer.NodeID, idleAt), "a handshake after the peer was found idle")
	assert.Equal(t, 1, n.WireGuardPeers(), "the peer stays in WireGuard's configuration")
	assert.Equal(t, int32(0), n.TrimmedCount())

	assert.True(t, n.TrimForTest(peer.NodeID, idleAt.Add(time.Second)), "no traffic since the peer was found idle")
	assert.Equal(t, 0, n.WireGuardPeers(), "the quiet peer is trimmed")
	assert.Equal(t, int32(1), n.TrimmedCount())
}

// TestEventsFromAnEarlierLife: replicated control instances publish a
// node's events on their own, so a peer's removal or offline from before
// its latest registration can arrive after that registration's update.
// Such an event leaves the running peer as it is; one from the same or a
// later registration still applies.
func TestEventsFromAnEarlierLife(t *testing.T) {
	w := newLabWorld(t)
	n := startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{}, func(c *node.Config) { c.ICE.Lazy = false })
	life2 := controlapi.Peer{NodeID: "fake", Name: "peer", PublicKey: key.NewPrivate().Public(),
		Address: netip.MustParsePrefix("100.96.0.9/10"), Epoch: 2000}
	life1 := life2
	life1.Epoch = 1000
	offline := func(p controlapi.Peer) controlapi.Peer { p.Offline = true; return p }
	running := func() (bool, controlapi.Peer) {
		for _, st := range n.Status() {
			if st.Peer.NodeID == life2.NodeID {
				return st.Online, st.Peer
			}
		}
		return false, controlapi.Peer{}
	}

	n.SetPeerForTest(life2)
	n.SetPeerForTest(offline(life1))
	online, _ := running()
	assert.True(t, online, "an offline from the earlier life took the running peer offline")
	n.RemovePeerForTest(life1)
	require.Equal(t, 1, n.PeerCount(), "a removal of the earlier life removed the running peer")
	assert.Equal(t, 1, n.WireGuardPeers())
	tagged := life1
	tagged.Tags = []string{"stale"}
	n.SetPeerForTest(tagged)
	_, got := running()
	assert.Empty(t, got.Tags, "an update from the earlier life replaced the running one's")

	n.SetPeerForTest(offline(life2))
	online, _ = running()
	assert.False(t, online, "an offline of the running life")
	n.SetPeerForTest(life2)
	online, _ = running()
	assert.True(t, online, "back online, the same life")
	later := life2
	later.Epoch = 3000
	n.RemovePeerForTest(later)
	assert.Zero(t, n.PeerCount(), "a removal of a later life")
	assert.Zero(t, n.WireGuardPeers())
}

// TestEventsOutOfRegistryOrder: control instances sharing a registry
// publish events and answer lists each on their own, so a node gets them
// out of the registry's order: an add after the removal it preceded, an
// older update after a newer one, an add a later list already left out.
// The revisions they carry put them back in order; presence news from
// an instance with an older copy of the record still applies.
func TestEventsOutOfRegistryOrder(t *testing.T) {
	w := newLabWorld(t)
	n := startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{}, func(c *node.Config) { c.ICE.Lazy = false })
	fake := func(id string, rev uint64, tags ...string) controlapi.Peer {
		return controlapi.Peer{NodeID: id, Name: id, PublicKey: key.NewPrivate().Public(),
			Address: netip.MustParsePrefix("100.96.0.9/10"), Epoch: 1000, Tags: tags, Rev: rev}
	}
	ev := func(t controlapi.PeerEventType, p controlapi.Peer) controlapi.PeerEvent {
		return controlapi.PeerEvent{Type: t, Peer: p}
	}
	find := func(id string) (controlapi.Peer, bool) {
		for _, p := range n.Peers() {
			if p.NodeID == id {
				return p, true
			}
		}
		return controlapi.Peer{}, false
	}

	// Added at 5 (instance A), removed at 5 (instance B); A's add comes last.
	p5 := fake("one", 5)
	n.PeerEventForTest(ev(controlapi.PeerAdded, p5))
	n.PeerEventForTest(ev(controlapi.PeerRemoved, p5))
	n.PeerEventForTest(ev(controlapi.PeerAdded, p5))
	_, held := find("one")
	assert.False(t, held, "an add that came after its own record's removal brought the peer back")
	assert.Zero(t, n.WireGuardPeers())

	// Registered again (a new record, 9) and updated (12); the update of
	// 9 and the removal of 9 come late.
	p9 := fake("one", 9, "old")
	p9.Epoch = 2000
	n.PeerEventForTest(ev(controlapi.PeerAdded, p9))
	_, held = find("one")
	require.True(t, held, "a new record after the removal")
	p12 := p9
	p12.Rev, p12.Tags = 12, []string{"new"}
	n.PeerEventForTest(ev(controlapi.PeerUpdated, p12))
	n.PeerEventForTest(ev(controlapi.PeerUpdated, p9))
	got, _ := find("one")
	assert.Equal(t, []string{"new"}, got.Tags, "an older update replaced a newer one")
	n.PeerEventForTest(ev(controlapi.PeerRemoved, p9))
	_, held = find("one")
	assert.True(t, held, "the removal of an older record removed the newer one")

	// An instance whose copy of the record is older saw it go offline:
	// news all the same.
	off := p9
	off.Offline = true
	n.PeerEventForTest(ev(controlapi.PeerOffline, off))
	got, _ = find("one")
	assert.True(t, got.Offline, "an offline from an instance with an older copy of the record was dropped")
	n.PeerEventForTest(ev(controlapi.PeerOnline, p12))
	got, _ = find("one")
	assert.False(t, got.Offline)

	// A list that holds every change up to 20 and not "two": two's add
	// at 15, late, stays out; a registration after the list (21) comes in.
	n.ReconcileForTest(controlapi.PeerList{Peers: []controlapi.Peer{p12}, Rev: 20}, nil)
	n.PeerEventForTest(ev(controlapi.PeerAdded, fake("two", 15)))
	_, held = find("two")
	assert.False(t, held, "an add older than a list that left the peer out")
	n.PeerEventForTest(ev(controlapi.PeerAdded, fake("two", 21)))
	_, held = find("two")
	assert.True(t, held, "an add after the list")

	// A list behind what the node applied (its barrier timed out: it holds
	// changes up to 20 only) does not remove two (21), which it cannot
	// know; an add of three at 18 applied while the list was asked for
	// is older than the list, which left three out: it goes.
	n.ReconcileForTest(controlapi.PeerList{Peers: []controlapi.Peer{p12}, Rev: 20}, func() {
		n.PeerEventForTest(ev(controlapi.PeerAdded, fake("three", 18)))
	})
	_, held = find("two")
	assert.True(t, held, "a list older than the peer's record removed it")
	_, held = find("three")
	assert.False(t, held, "an add older than the list, applied while it was asked for, outlived it")
	_, held = find("one")
	assert.True(t, held)
}

// TestBackOnlineOnceInWireGuard: a peer coming back online (restarted)
// is let through the TUN only once WireGuard holds it again. A packet let
// through before was dropped by WireGuard unseen (no peer for its
// address): a TCP connect to the peer waited out its SYN's retransmission
// (TestRestartFirstExchange took 1 s so in virtual time).
func TestBackOnlineOnceInWireGuard(t *testing.T) {
	w := newLabWorld(t)
	n := startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{}, func(c *node.Config) { c.ICE.Lazy = false })
	peer := controlapi.Peer{NodeID: "fake", Name: "peer", PublicKey: key.NewPrivate().Public(),
		Address: netip.MustParsePrefix("100.96.0.9/10"), Epoch: 1000}
	n.SetPeerForTest(peer)
	off := peer
	off.Offline = true
	n.SetPeerForTest(off)
	require.Zero(t, n.WireGuardPeers(), "offline: out of WireGuard")

	atOnline := -1
	n.OnOnlineAgainForTest(func(a netip.Addr) {
		if a == peer.Address.Addr() {
			atOnline = n.WireGuardPeers()
		}
	})
	back := peer
	back.Epoch = 2000
	n.SetPeerForTest(back)
	assert.Equal(t, 1, atOnline, "the peer's packets passed before WireGuard held it")
}

// TestIgnoredEventDoesNotHoldTheListBack: an event ignored as older than
// what the node applied, arriving while a list is asked for, does not
// keep the list's newer entry for that peer from being applied (it did:
// the peer, removed and registered again while the node missed it, stayed
// away until its record changed again).
func TestIgnoredEventDoesNotHoldTheListBack(t *testing.T) {
	w := newLabWorld(t)
	n := startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{}, func(c *node.Config) { c.ICE.Lazy = false })
	p90 := controlapi.Peer{NodeID: "p", Name: "p", PublicKey: key.NewPrivate().Public(),
		Address: netip.MustParsePrefix("100.96.0.9/10"), Epoch: 1000, Rev: 90}
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerAdded, Peer: p90})
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerRemoved, Peer: p90})
	p150 := p90
	p150.Epoch, p150.Rev = 2000, 150
	off90 := p90
	off90.Offline = true
	n.ReconcileForTest(controlapi.PeerList{Peers: []controlapi.Peer{p150}, Rev: 160}, func() {
		n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerOffline, Peer: off90}) // late, ignored
	})
	held := false
	for _, p := range n.Peers() {
		held = held || (p.NodeID == "p" && !p.Offline)
	}
	assert.True(t, held, "the list's newer record of the peer was not applied")
}

// TestRegistryStartedOver: a registry made again counts its revisions
// from 1 again and names itself with a larger Reg; the node forgets the
// old revisions, so the new registry's peers are taken, and what still
// comes from the old one is not.
func TestRegistryStartedOver(t *testing.T) {
	n := revNode(t)
	old := revPeer("p", "100.96.0.9/10", 1000, 900)
	n.ReconcileForTest(controlapi.PeerList{Peers: []controlapi.Peer{old}, Rev: 1000, Reg: 1}, nil)
	fresh := old
	fresh.Rev = 3
	n.ReconcileForTest(controlapi.PeerList{Peers: []controlapi.Peer{fresh}, Rev: 5, Reg: 2}, nil)
	newcomer := revPeer("q", "100.96.0.10/10", 5000, 6)
	newcomer.Reg = 2
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerAdded, Peer: newcomer})
	assert.True(t, holds(n, "q"), "a peer of the new registry read as older than the old registry's last list")
	assert.True(t, holds(n, "p"))
	lateRemoval := old
	lateRemoval.Reg = 1
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerRemoved, Peer: lateRemoval})
	assert.True(t, holds(n, "p"), "a removal from the old registry, late, removed the peer")
}

// TestRecentRemovalDoesNotHideTheNextRegistration: a peer's removal,
// applied while a list was asked for, does not hold back the list's
// newer record of it (its next registration); the registration's own
// event, later still, is then no news.
func TestRecentRemovalDoesNotHideTheNextRegistration(t *testing.T) {
	n := revNode(t)
	p50 := revPeer("p", "100.96.0.9/10", 1000, 50)
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerAdded, Peer: p50})
	p60 := p50
	p60.Epoch, p60.Rev = 2000, 60
	n.ReconcileForTest(controlapi.PeerList{Peers: []controlapi.Peer{p60}, Rev: 70}, func() {
		n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerRemoved, Peer: p50})
	})
	assert.True(t, holds(n, "p"), "the list's next registration of the peer, held back by its removal")
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerAdded, Peer: p60})
	assert.True(t, holds(n, "p"), "the next registration's own event, after the list, dropped")
}

// TestLaggingListAfterANewerOne: a list from an instance behind (its
// revision below the last list's) neither removes a peer newer than it
// nor brings back one removed since.
func TestLaggingListAfterANewerOne(t *testing.T) {
	n := revNode(t)
	p := revPeer("p", "100.96.0.9/10", 1000, 95)
	q := revPeer("q", "100.96.0.10/10", 1000, 50)
	n.ReconcileForTest(controlapi.PeerList{Peers: []controlapi.Peer{p, q}, Rev: 96, Reg: 7}, nil)
	q.Rev = 98
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerRemoved, Peer: q})
	n.ReconcileForTest(controlapi.PeerList{Peers: []controlapi.Peer{p}, Rev: 100, Reg: 7}, nil)
	q.Rev = 50
	n.ReconcileForTest(controlapi.PeerList{Peers: []controlapi.Peer{q}, Rev: 90, Reg: 7}, nil)
	assert.True(t, holds(n, "p"), "p (revision 95) removed by a list at 90")
	assert.False(t, holds(n, "q"), "q, removed at 98, brought back by a list at 90")
}

// TestTakeBackOfALostRegistration: control takes back a registration
// whose answer was lost by writing the earlier record again, with its
// earlier epoch, at a later revision. Nodes that applied the
// registration take the take-back, and then the earlier registration's
// presence; signals name the epoch the peer runs under.
func TestTakeBackOfALostRegistration(t *testing.T) {
	n := revNode(t)
	e1 := revPeer("p", "100.96.0.9/10", 1000, 5)
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerAdded, Peer: e1})
	e2 := e1
	e2.Epoch, e2.Rev = 2000, 10
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerUpdated, Peer: e2})
	require.Equal(t, uint64(2000), n.PeerEpochForTest("p"))
	back := e1
	back.Rev = 11
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerUpdated, Peer: back})
	assert.Equal(t, uint64(1000), n.PeerEpochForTest("p"), "the take-back dropped: signals name a registration the peer never learnt")
	late := e2
	late.Offline = true
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerOffline, Peer: late})
	require.Len(t, n.Peers(), 1)
	assert.False(t, n.Peers()[0].Offline, "an offline of the registration taken back, from a lagging instance, taken")
	off := back
	off.Offline = true
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerOffline, Peer: off})
	require.Len(t, n.Peers(), 1)
	assert.True(t, n.Peers()[0].Offline, "the offline of the record taken back dropped")
}

// TestListDoesNotUndoARecentPresence: a peer's offline (or online),
// applied while a list was asked for, is not undone by the list's older
// copy of the peer, which carries the same record revision.
func TestListDoesNotUndoARecentPresence(t *testing.T) {
	n := revNode(t)
	p := revPeer("p", "100.96.0.9/10", 1000, 10)
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerAdded, Peer: p})
	n.ReconcileForTest(controlapi.PeerList{Peers: []controlapi.Peer{p}, Rev: 20}, func() {
		n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerOffline, Peer: p})
	})
	require.Len(t, n.Peers(), 1)
	assert.True(t, n.Peers()[0].Offline, "the list's older copy undid the offline applied meanwhile")

	off := p
	off.Offline = true
	n.ReconcileForTest(controlapi.PeerList{Peers: []controlapi.Peer{off}, Rev: 30}, func() {
		n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerOnline, Peer: p})
	})
	require.Len(t, n.Peers(), 1)
	assert.False(t, n.Peers()[0].Offline, "the list's older copy undid the online applied meanwhile")
}

// TestOlderCopyKeepsTheSignalledEpoch: a peer that registered again
// signals its new epoch before control's event of it arrives; a list
// entry or presence event carrying the record held (its earlier epoch)
// neither restarts the peer nor takes its epoch back.
func TestOlderCopyKeepsTheSignalledEpoch(t *testing.T) {
	n := revNode(t)
	p := revPeer("p", "100.96.0.9/10", 1000, 10)
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerAdded, Peer: p})
	n.LearnPeerEpochForTest("p", 2000)
	n.ReconcileForTest(controlapi.PeerList{Peers: []controlapi.Peer{p}, Rev: 20}, nil)
	assert.Equal(t, uint64(2000), n.PeerEpochForTest("p"), "a list's copy of the held record restarted the peer under its earlier epoch")
	n.PeerEventForTest(controlapi.PeerEvent{Type: controlapi.PeerOnline, Peer: p})
	assert.Equal(t, uint64(2000), n.PeerEpochForTest("p"), "a presence event's copy restarted the peer under its earlier epoch")
}

func revNode(t *testing.T) *node.Node {
	t.Helper()
	w := newLabWorld(t)
	return startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{}, func(c *node.Config) { c.ICE.Lazy = false })
}

func revPeer(id, addr string, epoch, rev uint64) controlapi.Peer {
	return controlapi.Peer{NodeID: id, Name: id, PublicKey: key.NewPrivate().Public(),
		Address: netip.MustParsePrefix(addr), Epoch: epoch, Rev: rev}
}

// holds reports whether n holds the peer id, online or not.
func holds(n *node.Node, id string) bool {
	for _, p := range n.Peers() {
		if p.NodeID == id {
			return true
		}
	}
	return false
}

// TestPathsLeadFromTheirMaking: a path WireGuard's configuration makes
// for a new peer, before the node's peer exists, already knows which
// side's handshake wins a crossing: ours when our key is the lower.
func TestPathsLeadFromTheirMaking(t *testing.T) {
	n := revNode(t)
	id := n.Identity()
	me := id.PublicKey()
	var above, below key.Public
	for above.IsZero() || below.IsZero() {
		k := key.NewPrivate().Public()
		if bytes.Compare(me[:], k[:]) < 0 {
			above = k
		} else {
			below = k
		}
	}
	assert.True(t, n.LeadsOnMakingForTest(above), "our key is the lower: we lead")
	assert.False(t, n.LeadsOnMakingForTest(below), "the peer's key is the lower")
}
