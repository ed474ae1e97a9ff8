package node_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/node"
)

// TestSharedGathering (issue 22.3): a node's server-reflexive discovery is
// one per socket and STUN server, shared by every peer's attempt: eight
// nodes, each starting seven attempts at once, cost the STUN server one
// Binding request per node, not seven (sharedSrflx; without it, 28). Idle
// lazy peers send none at all.
func TestSharedGathering(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		w := newLabWorld(t)
		lazyNode := startNode(t, w.site(t, "full-cone"), "lazy", &stockNetstack{}, lazy)
		for i := range 50 {
			lazyNode.AddPeerForTest(controlapi.Peer{
				NodeID: fmt.Sprintf("fake%d", i), Name: fmt.Sprintf("peer-%d", i), PublicKey: key.NewPrivate().Public(),
				Address: netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 96, 0, byte(i)}), 10),
			})
		}
		time.Sleep(5 * time.Second)
		assert.Zero(t, w.stun.Stats().Requests, "idle lazy peers asked STUN")
		require.NoError(t, lazyNode.Close())

		const nodes = 8
		var all []*node.Node
		for i := range nodes {
			all = append(all, startNode(t, w.site(t, "full-cone"), fmt.Sprintf("n%d", i), &stockNetstack{}, exactICE))
		}
		for _, n := range all {
			require.Eventually(t, func() bool {
				st := n.Status()
				direct := 0
				for _, s := range st {
					if s.Online && s.Path == node.PathDirect {
						direct++
					}
				}
				return direct == nodes-1
			}, 20*time.Second, 10*time.Millisecond, "%s: not every peer direct: %+v", n.Identity().Name, n.Status())
		}
		got := w.stun.Stats().Requests
		t.Logf("%d nodes, %d attempts each: %d STUN Binding requests", nodes, nodes-1, got)
		assert.LessOrEqual(t, got, uint64(nodes), "gathering is not shared: %d attempts", nodes*(nodes-1))
	})
}
