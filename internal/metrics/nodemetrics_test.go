package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// NodeMetrics lists what the collector describes, with the same labels.
func TestNodeMetricsNames(t *testing.T) {
	names := NodeMetrics()
	assert.Equal(t, []string{"path", "direction"}, names["lattice_node_bytes_total"])
	ch := make(chan *prometheus.Desc, 64)
	NewNodeCollector(nil, true, 1).Describe(ch)
	close(ch)
	n := 0
	for range ch {
		n++
	}
	require.Equal(t, n, len(names), "every described metric is listed once")
	names["lattice_node_peers"][0] = "changed"
	assert.Equal(t, "path", NodeMetrics()["lattice_node_peers"][0], "callers get a copy")
}
