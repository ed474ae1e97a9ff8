package node_test

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/node"
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
