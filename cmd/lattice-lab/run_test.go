package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRunDefault: lattice-lab run with no arguments is the quickstart
// scenario, and it passes by itself.
func TestRunDefault(t *testing.T) {
	dir := t.TempDir()
	code, out, stderr := run(t, "run", "--report", dir)
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	for _, p := range []string{
		`lattice-lab run: scenario quickstart on topology quickstart \(5 networks, 4 routers, 4 hosts, 3 nodes; control, 1 relay, 1 STUN server\)`,
		`  \[1/18\] discover laptop's NAT \(RFC 5780\)`,
		`    ✓ endpoint-independent mapping, address-and-port-dependent filtering \(as configured\)  .*`,
		`    ✓ 16MiB in .*, SHA-256 ok  .*`,
		`✓ scenario quickstart passed: 18 steps in [0-9.]+s`,
	} {
		assert.Regexp(t, regexp.MustCompile(`(?m)^`+p+`$`), out)
	}
	for _, f := range []string{"result.json", "junit.xml", "report.html"} {
		_, err := os.Stat(filepath.Join(dir, f))
		assert.NoError(t, err)
	}
}

func TestRunTopologyOnce(t *testing.T) {
	code, out, stderr := run(t, "run", "--once", "../../topologies/quickstart.yaml")
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	assert.Regexp(t, `(?m)^✓ all 3 node pairs have a path \(2 direct\)$`, out)
}

// TestRunScenarioFlagAlone: --scenario without a topology runs the
// scenario on the topology it names (it was parsed as a topology).
func TestRunScenarioFlagAlone(t *testing.T) {
	code, out, stderr := run(t, "run", "--scenario", "../../scenarios/pair-full-cone+full-cone.yaml")
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	assert.Regexp(t, `(?m)^✓ scenario pair-full-cone\+full-cone passed: 4 steps in [0-9.]+s$`, out)
}

func TestRunInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	code := execute(ctx, []string{"run"}, &out, &errOut)
	assert.Equal(t, 130, code, "%s%s", out.String(), errOut.String())
	assert.Equal(t, "lattice-lab: interrupted (context canceled)\n", errOut.String())
}

// TestRunScenarioOn: run TOPOLOGY --scenario SCENARIO puts the scenario on
// that topology, loaded as every command loads a file: a path is the file
// on disk (not the shipped file of that name), builtin:NAME the shipped
// topology even when a scenario has the name.
func TestRunScenarioOn(t *testing.T) {
	shipped, err := os.ReadFile("../../topologies/quickstart.yaml")
	require.NoError(t, err)
	t.Chdir(t.TempDir())
	edited := regexp.MustCompile(`(?m)^name: quickstart$`).ReplaceAll(shipped, []byte("name: edited"))
	require.NoError(t, os.MkdirAll("topologies", 0o755))
	require.NoError(t, os.WriteFile(filepath.Join("topologies", "quickstart.yaml"), edited, 0o644))
	for _, tc := range []struct {
		name, topology, want string
	}{
		{name: "a file on disk", topology: "topologies/quickstart.yaml", want: "edited"},
		{name: "a builtin topology a scenario shares the name of", topology: "builtin:quickstart", want: "quickstart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Interrupted before the first step: loading is what is tested.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var out, errOut bytes.Buffer
			code := execute(ctx, []string{"run", tc.topology, "--scenario", "builtin:quickstart"}, &out, &errOut)
			assert.Equal(t, 130, code, "%s%s", out.String(), errOut.String())
			assert.Regexp(t, `(?m)^lattice-lab run: scenario quickstart on topology `+tc.want+` \(5 networks, 4 routers, 4 hosts, 3 nodes; control, 1 relay, 1 STUN server\)$`, out.String())
		})
	}
}

// TestRunClock: lattice-lab cannot run a bubble, so --clock virtual is an
// error saying where virtual time is, and a bad --clock is a usage error.
func TestRunClock(t *testing.T) {
	code, _, stderr := run(t, "run", "--clock", "virtual")
	assert.Equal(t, 1, code)
	assert.Equal(t, "lattice-lab: scenario quickstart: virtual time: lattice-lab runs on the wall clock (a testing/synctest bubble needs a *testing.T); "+
		"for virtual time: go test $(scripts/vtime-flags.sh) ./scenarios/ -run 'TestScenarios/NAME$', or make scenarios\n", stderr)
	code, _, stderr = run(t, "run", "--clock", "fast")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--clock "fast": want auto, real or virtual`)
}

// TestRunFlagsForTheOtherKind: a topology-watching flag given with a
// scenario, or --report given with a topology, used to be ignored; and a
// --report DIR that cannot be made fails before the scenario runs.
func TestRunFlagsForTheOtherKind(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600))
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"once with a scenario", []string{"run", "builtin:quickstart", "--once"}, 2, "--once: for watching a topology; builtin:quickstart is a scenario"},
		{"duration and interval with a scenario", []string{"run", "--duration", "1m", "--interval", "1s"}, 2, "--duration, --interval: for watching a topology"},
		{"report with a topology", []string{"run", "builtin:topologies/cgnat", "--report", t.TempDir()}, 2, "--report: builtin:topologies/cgnat is a topology"},
		{"report dir cannot be made", []string{"run", "builtin:quickstart", "--report", filepath.Join(blocker, "r")}, 1, "--report: mkdir " + blocker + ": not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a missed check runs the lab
			defer cancel()
			var out, errOut bytes.Buffer
			code := execute(ctx, tc.args, &out, &errOut)
			assert.Equal(t, tc.code, code, "%s\n%s", out.String(), errOut.String())
			assert.Contains(t, errOut.String(), tc.want)
		})
	}
}

// TestRunHelpScenarioOnExamples: each 'run TOPOLOGY --scenario SCENARIO'
// example in run --help loads (the scenario's nodes exist on that
// topology); it is interrupted before its first step.
func TestRunHelpScenarioOnExamples(t *testing.T) {
	n := 0
	for line := range strings.Lines(newRunCmd().Example) {
		fields := strings.Fields(line)
		if len(fields) < 5 || fields[0] != "lattice-lab" || !slices.Contains(fields, "--scenario") {
			continue
		}
		n++
		for i, f := range fields {
			if strings.HasSuffix(f, ".yaml") { // relative to the repository
				fields[i] = filepath.Join("..", "..", f)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var out, errOut bytes.Buffer
		code := execute(ctx, fields[1:], &out, &errOut)
		assert.Equal(t, 130, code, "%s: %s%s", line, out.String(), errOut.String())
		assert.Contains(t, out.String(), "lattice-lab run: scenario ", line)
	}
	assert.Equal(t, 1, n, "the examples have one run --scenario line")
}
