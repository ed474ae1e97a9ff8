package runner

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/topology"
)

// TestTransferOverLatencyDropsNothing moves 32 MiB from laptop to tablet
// over the quickstart's direct path, whose last mile adds 10 ms each way
// (20 ms RTT): no node's mux drops a WireGuard packet, and the link still
// delays as its topology says. Before the mux waited for room on lab
// sockets, the receiving node's 1,024-entry queue dropped about 5% of the
// packets of such a transfer, and TCP backed off at each loss.
func TestTransferOverLatencyDropsNothing(t *testing.T) {
	_, plan, err := topology.Load("../../topologies/quickstart.yaml")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	l, err := Up(ctx, Config{Plan: plan, StateDir: t.TempDir(), Nodes: []string{"laptop", "tablet"}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.Close()) })
	_, err = l.WaitPath(ctx, "laptop", "tablet", "direct")
	require.NoError(t, err)

	drops := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, name := range []string{"laptop", "tablet"} {
			rn, err := l.node(name)
			require.NoError(t, err)
			out[name] = rn.(*inProcessNode).node.MuxStats().WireGuardDropped
		}
		return out
	}
	before := drops()
	d, err := l.Transfer(ctx, "laptop", "tablet", 32<<20)
	require.NoError(t, err)
	t.Logf("32 MiB in %v (%.0f Mbit/s)", d, 32<<20*8/d.Seconds()/1e6)
	assert.Equal(t, before, drops(), "WireGuard packets dropped at a node's mux")

	ping, err := l.Ping(ctx, "laptop", "tablet", 3)
	require.NoError(t, err)
	require.Positive(t, ping.Received)
	assert.GreaterOrEqual(t, ping.AvgRTT, 20*time.Millisecond, "the tablet's 10 ms each way still holds")
}
