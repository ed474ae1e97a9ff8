package scenarios_test

import (
	"flag"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/lab/labtest/scenariotest"
	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/runner"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/vtime"
	"github.com/latticelab/lattice/scenarios"
)

var (
	reportDir = flag.String("report", "", "write result.json, junit.xml and report.html of the run to `DIR`")
	parallel  = flag.Int("scenarios", 0, "run at most `N` scenarios at once (0: one more than the CPUs, since scenarios mostly wait)")
	clockFlag = flag.String("clock", "auto", "run TestScenarios on this clock: auto (virtual where a scenario can, if the build has the shim), virtual or real")
)

// realTimeSet are the scenarios TestScenariosRealTime runs on the wall
// clock too, so that the two clocks cannot drift apart: the quickstart, a
// relay fallback, a NAT's, a node restart and a pod sandbox.
var realTimeSet = []string{"quickstart", "relay-fallback-upgrade", "cgnat-nat-reboot", "node-restart", "sandbox-pod-socks5"}

func TestMain(m *testing.M) {
	runner.MaybeRunChild() // the gvisor sandboxes' children are this test binary
	flag.Parse()
	if ok, why := vtime.Available(); !ok && *clockFlag == runner.ClockAuto {
		// The one line that says the scenarios run on the wall clock, and
		// how to have virtual time.
		fmt.Printf("scenarios: real time, not virtual: %s; for virtual time: go test $(scripts/vtime-flags.sh) ./scenarios/... or make scenarios\n", why)
	}
	goleak.VerifyTestMain(m)
}

// TestScenarios runs every scenario file in this directory as a subtest,
// on the clock -clock says: by default virtual time where a scenario can
// run in it and the build has the shim (scripts/vtime-flags.sh), else real
// time. Scenarios that need the Pro edition, root or gvisor skip with the
// reason where those are missing.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 30, "the suite promises at least 30 scenarios")
	runAll(t, files, *clockFlag, *reportDir)
}

// TestScenariosRealTime runs realTimeSet on the wall clock: the same
// verdicts as in virtual time, or the clocks have drifted apart.
func TestScenariosRealTime(t *testing.T) {
	if *clockFlag == scenario.ClockReal {
		t.Skip("-clock=real: TestScenarios runs every scenario in real time already")
	}
	if ok, _ := vtime.Available(); !ok {
		t.Skip("no virtual time in this build: TestScenarios runs every scenario in real time already")
	}
	files := make([]string, len(realTimeSet))
	for i, name := range realTimeSet {
		files[i] = name + ".yaml"
	}
	runAll(t, files, scenario.ClockReal, "")
}

// runAll runs files as parallel subtests on clock and writes their reports
// to dir, if set.
func runAll(t *testing.T, files []string, clock, dir string) {
	n := *parallel
	if n <= 0 {
		n = runtime.GOMAXPROCS(0) + 1
	}
	sem := make(chan struct{}, n)
	var mu sync.Mutex
	var results []*report.Result
	t.Cleanup(func() {
		if dir == "" {
			return
		}
		slices.SortFunc(results, func(a, b *report.Result) int { return strings.Compare(a.Scenario, b.Scenario) })
		paths, err := report.WriteDir(dir, results)
		if err != nil {
			t.Errorf("report: %v", err)
			return
		}
		t.Logf("reports: %s", strings.Join(paths, ", "))
	})
	for _, file := range files {
		name := strings.TrimSuffix(file, ".yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f, err := scenario.Load(file)
			require.NoError(t, err)
			if why := runner.SkipReason(f); why != "" {
				mu.Lock()
				results = append(results, &report.Result{Scenario: f.Name, File: file, Description: f.Description,
					Topology: f.Plan().Name, Tags: f.Tags, Status: report.Skipped, SkipReason: why})
				mu.Unlock()
				t.Skip(why)
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			res := scenariotest.Run(t, f, scenariotest.Options{Clock: clock, Options: runner.Options{
				Progress: func(s string) { t.Log(s) }, StateDir: t.TempDir(), Slowdown: slowdown}})
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
			if res.Status == report.Skipped {
				t.Skip(res.SkipReason)
			}
			t.Logf("%s in %s of network time on the %s clock, %s of wall time", res.Status,
				res.Duration.Round(time.Millisecond), res.Clock, res.Wall.Round(time.Millisecond))
			require.Equal(t, report.Passed, res.Status, res.Error)
		})
	}
}

// TestEmbedsWhatScenariosName: every file a scenario names relative to
// itself (an egress policy) is in FS, so the lattice-lab binary has it
// wherever it runs.
func TestEmbedsWhatScenariosName(t *testing.T) {
	files, err := fs.Glob(scenarios.FS, "*.yaml")
	require.NoError(t, err)
	ref := regexp.MustCompile(`egress_policy:\s*([^\s,}]+)`)
	found := 0
	for _, file := range files {
		data, err := fs.ReadFile(scenarios.FS, file)
		require.NoError(t, err)
		for _, m := range ref.FindAllSubmatch(data, -1) {
			found++
			_, err := fs.Stat(scenarios.FS, path.Clean(string(m[1])))
			assert.NoError(t, err, "%s names %s", file, m[1])
		}
	}
	assert.Positive(t, found, "no scenario names a file; the pattern is stale")
}
