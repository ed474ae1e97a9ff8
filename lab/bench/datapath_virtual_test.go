package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/runner"
)

// TestDataPathVirtual moves the datapath bench's 32 MiB over its direct
// pair (the quickstart's laptop → tablet, 20 ms round trip) in virtual
// time, where the figure is network time alone: what TCP allows when
// nothing costs CPU, a ceiling for the bench's wall-clock figure. It takes
// 460 ms, 23 round trips (584 Mbit/s). The first ten carry under 5 MB:
// the tablet's receive window, auto-tuned from 64 KiB, holds slow start
// back. Then the sender's TCP moves 2 MiB per round trip, half its 4 MiB
// send buffer: each round trip's ACKs arrive together, and gVisor wakes a
// writer blocked on a full send buffer only once half of it is
// acknowledged. (A 6 MiB send buffer with a 32 MiB receive buffer made it
// 380 ms; 16 MiB, 260 ms.)
func TestDataPathVirtual(t *testing.T) {
	plan := quickstart(t)
	inVirtualTime(t, func(t *testing.T, ctx context.Context) {
		lab, err := runner.Up(ctx, runner.Config{Plan: plan, Nodes: []string{"laptop", "tablet"}, StateDir: t.TempDir()})
		require.NoError(t, err)
		defer func() { assert.NoError(t, lab.Close()) }()
		_, err = lab.WaitPath(ctx, "laptop", "tablet", "direct")
		require.NoError(t, err)
		const size = 32 << 20
		d, err := lab.Transfer(ctx, "laptop", "tablet", size)
		require.NoError(t, err)
		t.Logf("%d MiB in %v of network time: %.0f Mbit/s", size>>20, d, size*8/d.Seconds()/1e6)
		assert.LessOrEqual(t, d.Round(time.Millisecond), 460*time.Millisecond, "23 round trips at most")
	})
}
