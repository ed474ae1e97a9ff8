package sandboxcmd

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/metrics"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/sandbox"
)

// sandboxPeers reads a sandbox's node through its status, for the node
// collector.
type sandboxPeers struct{ d sandbox.IsolationDriver }

func (s sandboxPeers) Status() []node.PeerStatus { return s.d.Status().Peers }

// node is the sandbox's node, nil before it has one.
func (s sandboxPeers) node() *node.Node {
	if d, ok := s.d.(interface{ Node() *node.Node }); ok {
		return d.Node()
	}
	return nil
}

// PathSwitches are the sandbox's node's own counts (none before it has a
// node).
func (s sandboxPeers) PathSwitches() map[node.SwitchKey]uint64 {
	if n := s.node(); n != nil {
		return n.PathSwitches()
	}
	return nil
}

// ICECounts are the sandbox's node's own counts (none before it has a
// node).
func (s sandboxPeers) ICECounts() node.ICECounts {
	if n := s.node(); n != nil {
		return n.ICECounts()
	}
	return node.ICECounts{}
}

// RelayStats is the sandbox's node's relay client's, when it has a node.
func (s sandboxPeers) RelayStats() (node.RelayStats, bool) {
	if n := s.node(); n != nil {
		return n.RelayStats()
	}
	return node.RelayStats{}, false
}

var (
	_ metrics.EgressCounters = (*sandbox.PodDriver)(nil)
	_ metrics.EgressCounters = (*sandbox.RunscDriver)(nil)
)

// sandboxCollectors are the collectors for a running sandbox's /metrics.
func sandboxCollectors(d sandbox.IsolationDriver, m *cli.MetricsFlags) []prometheus.Collector {
	cs := []prometheus.Collector{metrics.NewNodeCollector(sandboxPeers{d}, m.PerPeer, m.PeerLimit)}
	if c, ok := d.(metrics.EgressCounters); ok {
		cs = append(cs, metrics.SandboxEgress(c))
	}
	return cs
}
