package node

import (
	"strings"

	"github.com/latticelab/lattice/control"
)

// AddPeerForTest adds a peer as control's announcement of it would
// (BenchmarkIdlePeers: peers without nodes behind them).
func (n *Node) AddPeerForTest(info control.Peer) { n.addPeer(info) }

// PeerCount is how many online peers the node runs.
func (n *Node) PeerCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.peers)
}

// WireGuardPeers is how many peers WireGuard's configuration holds.
func (n *Node) WireGuardPeers() int {
	conf, err := n.dev.IpcGet()
	if err != nil {
		return -1
	}
	return strings.Count(conf, "public_key=")
}
