package scenarios_test

import (
	"context"
	"flag"
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

	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/runner"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/scenarios"
)

var (
	reportDir = flag.String("report", "", "write result.json, junit.xml and report.html of the run to `DIR`")
	parallel  = flag.Int("scenarios", 0, "run at most `N` scenarios at once (0: one more than the CPUs, since scenarios mostly wait)")
)

func TestMain(m *testing.M) {
	runner.MaybeRunChild() // the gvisor sandboxes' children are this test binary
	goleak.VerifyTestMain(m)
}

// TestScenarios runs every scenario file in this directory as a subtest.
// Scenarios that need the Pro edition, root or gvisor skip with the
// reason where those are missing.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 30, "the suite promises at least 30 scenarios")
	n := *parallel
	if n <= 0 {
		n = runtime.GOMAXPROCS(0) + 1
	}
	sem := make(chan struct{}, n)
	var mu sync.Mutex
	var results []*report.Result
	t.Cleanup(func() {
		if *reportDir == "" {
			return
		}
		slices.SortFunc(results, func(a, b *report.Result) int { return strings.Compare(a.Scenario, b.Scenario) })
		paths, err := report.WriteDir(*reportDir, results)
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
			ctx, cancel := context.WithTimeout(t.Context(), time.Duration(slowdown)*5*time.Minute)
			defer cancel()
			res := runner.RunScenario(ctx, f, runner.Options{Progress: func(s string) { t.Log(s) },
				StateDir: t.TempDir(), Slowdown: slowdown})
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
			if res.Status == report.Skipped {
				t.Skip(res.SkipReason)
			}
			t.Logf("%s in %s", res.Status, res.Duration.Round(time.Millisecond))
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
