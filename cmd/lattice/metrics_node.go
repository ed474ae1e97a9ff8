package main

import "github.com/latticelab/lattice/internal/metrics"

// The node's collector is internal/metrics.NodeCollector, shared with the
// lab (lab/runner scrapes it in process); these names keep this package's
// callers and tests short.

func newNodeCollector(src metrics.StatusSource, perPeer bool, peerLimit int) *metrics.NodeCollector {
	return metrics.NewNodeCollector(src, perPeer, peerLimit)
}

var switchReason = metrics.SwitchReason
