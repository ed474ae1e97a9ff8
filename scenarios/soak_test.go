package scenarios_test

import (
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/labtest/scenariotest"
	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/runner"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/vtime"
)

var (
	soakFlag  = flag.Bool("soak", false, "run TestSoak: the scenarios in soak/, hours of network time in minutes of wall time (make soak)")
	childFile = flag.String("bench.scenario", "", "TestBenchChild: run this scenario file and write its result to -bench.result (BenchmarkScenarioVirtual's child)")
	childOut  = flag.String("bench.result", "", "TestBenchChild: where to write the result's JSON")
)

// TestSoak runs every scenario in soak/ on the virtual clock, one at a
// time (steady's heap samples are the process's, so nothing runs beside
// them). An hour of network time costs minutes of wall time, more under
// -race, so they run with -soak only (make soak); on the wall clock they
// would take their hours.
func TestSoak(t *testing.T) {
	if !*soakFlag {
		t.Skip("the soak scenarios run with -soak (make soak): each costs minutes of wall time")
	}
	if ok, why := vtime.Available(); !ok {
		t.Fatalf("the soak scenarios need virtual time (an hour of network time on the wall clock takes the hour): %s; run make soak", why)
	}
	files, err := filepath.Glob("soak/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			res := runOne(t, file)
			require.Equal(t, report.Passed, res.Status, res.Error)
		})
	}
}

func runOne(t *testing.T, file string) *report.Result {
	f, err := scenario.Load(file)
	require.NoError(t, err)
	// Each line says when it happened in network time (the bubble's
	// clock, from the first line; Progress runs inside the bubble, where no
	// wall clock can be read).
	var epoch time.Time
	progress := func(s string) {
		now := time.Now()
		if epoch.IsZero() {
			epoch = now
		}
		t.Logf("[%s] %s", now.Sub(epoch).Truncate(time.Second), s)
	}
	res := scenariotest.Run(t, f, scenariotest.Options{Clock: scenario.ClockVirtual, Options: runner.Options{
		Progress: progress, StateDir: t.TempDir()}})
	t.Logf("%s: %s of network time in %s of wall time (%.1f× real time)", res.Status, res.Duration, res.Wall,
		res.Duration.Seconds()/res.Wall.Seconds())
	return res
}

// TestBenchChild is BenchmarkScenarioVirtual's child: a bubble needs a
// *testing.T, which a benchmark does not have, so the benchmark runs this
// test binary again with -bench.scenario and reads the result.
func TestBenchChild(t *testing.T) {
	if *childFile == "" {
		t.Skip("BenchmarkScenarioVirtual's child; runs with -bench.scenario")
	}
	f, err := scenario.Load(*childFile)
	require.NoError(t, err)
	res := scenariotest.Run(t, f, scenariotest.Options{Clock: scenario.ClockVirtual, Options: runner.Options{StateDir: t.TempDir()}})
	require.Equal(t, report.Passed, res.Status, res.Error)
	data, err := json.Marshal(childResult{NetworkSeconds: res.Duration.Seconds(), WallSeconds: res.Wall.Seconds()})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(*childOut, data, 0o600))
}

// childResult is what TestBenchChild tells the benchmark.
type childResult struct {
	NetworkSeconds float64 `json:"network_seconds"`
	WallSeconds    float64 `json:"wall_seconds"`
}

// BenchmarkScenarioVirtual runs scenarios on the virtual clock and
// reports x-realtime, network time over wall time (the wall time is the
// child's whole scenario run, bring-up and teardown included). The soak
// needs the virtual-time build: go test $(scripts/vtime-flags.sh)
// -run '^$' -bench ScenarioVirtual ./scenarios/
func BenchmarkScenarioVirtual(b *testing.B) {
	for _, bc := range []struct{ name, file string }{
		{"quickstart", "quickstart.yaml"},
		{"soak-20-nodes-1h", "soak/soak-20-nodes-1h.yaml"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if ok, why := vtime.Available(); !ok {
				b.Skipf("virtual time is unavailable in this build (%s): %s would run on the wall clock", why, bc.name)
			}
			var network, wall float64
			for b.Loop() {
				out := filepath.Join(b.TempDir(), "result.json")
				cmd := exec.Command(os.Args[0], "-test.run=^TestBenchChild$", "-test.count=1",
					"-bench.scenario="+bc.file, "-bench.result="+out)
				if msg, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%s: %v\n%s", bc.name, err, msg)
				}
				var r childResult
				data, err := os.ReadFile(out)
				require.NoError(b, err)
				require.NoError(b, json.Unmarshal(data, &r))
				network += r.NetworkSeconds
				wall += r.WallSeconds
			}
			b.ReportMetric(network/wall, "x-realtime")
			b.ReportMetric(network/float64(b.N), "network-s/op")
		})
	}
}
