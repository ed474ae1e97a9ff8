package bench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/labfile"
)

// BenchmarkLabDataPath runs `lattice-lab bench --only datapath` (the
// quickstart pair, direct and relayed) in the test binary, so the lab's
// overlay path can be profiled with -cpuprofile. Each iteration moves
// 32 MiB each way over both pairs; it reports both figures in Mbit/s.
func BenchmarkLabDataPath(b *testing.B) {
	var l labfile.Loader
	release := l.Hold()
	defer func() { require.NoError(b, release()) }()
	f, err := l.Load("builtin:quickstart", labfile.Options{Kind: labfile.Topology})
	require.NoError(b, err)
	topos := Topologies{Pair: f.Plan, Direct: [2]string{"laptop", "tablet"}, Relay: [2]string{"laptop", "desktop"}}
	sums := map[string]float64{}
	for b.Loop() {
		rep, err := Run(context.Background(), topos, Options{Only: []string{"datapath"}, Bytes: 32 << 20})
		require.NoError(b, err)
		for _, m := range rep.Metrics {
			sums[m.Name] += m.Value
		}
	}
	for name, v := range sums {
		b.ReportMetric(v/float64(b.N), name+"-Mbit/s")
	}
}
