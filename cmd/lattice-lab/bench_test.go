package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBench(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.pprof")
	code, out, stderr := run(t, "bench", "--only", "datapath", "--bytes", "1MiB", "--out", dir, "--cpuprofile", prof)
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	p, err := os.ReadFile(prof)
	require.NoError(t, err)
	require.Greater(t, len(p), 2)
	assert.Equal(t, []byte{0x1f, 0x8b}, p[:2], "a pprof profile is gzipped")
	assert.Regexp(t, `(?m)^  datapath_direct +[0-9.]+ Mbit/s$`, out)
	assert.Regexp(t, `(?m)^  datapath_relay +[0-9.]+ Mbit/s$`, out)
	assert.Regexp(t, `(?m)^  datapath_direct_pair_relayed +[0-9.]+ Mbit/s$`, out)
	for _, f := range []string{"bench.json", "bench.svg"} {
		_, err := os.Stat(filepath.Join(dir, f))
		assert.NoError(t, err)
	}
	// Against itself with a generous tolerance: no regression.
	code, out, _ = run(t, "bench", "--only", "datapath", "--bytes", "1MiB", "--out", t.TempDir(),
		"--baseline", filepath.Join(dir, "bench.json"), "--tolerance", "0.95")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "✓ no regressions")

	code, _, stderr = run(t, "bench", "--only", "datapath", "--bytes", "1MiB", "--out", t.TempDir(),
		"--cpuprofile", filepath.Join(dir, "missing", "cpu.pprof"))
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "cpu profile: open "+filepath.Join(dir, "missing", "cpu.pprof"))

	code, _, stderr = run(t, "bench", "--only", "latency")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--only "latency": want datapath, connect or scale`)
}

// TestBenchScaleProgress: the scale bench says each node as it comes up
// and writes a heap profile with --memprofile.
func TestBenchScaleProgress(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "heap.pprof")
	code, out, stderr := run(t, "bench", "--only", "scale", "--scale", "builtin:quickstart", "--out", dir, "--memprofile", prof)
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	for _, n := range []string{"laptop", "tablet", "desktop"} {
		assert.Regexp(t, `(?m)^  node `+n+` up on `, out, "a line for each node as it comes up")
	}
	assert.Regexp(t, `(?m)^  scale_full_mesh +[0-9.]+ s$`, out)
	p, err := os.ReadFile(prof)
	require.NoError(t, err)
	require.Greater(t, len(p), 2)
	assert.Equal(t, []byte{0x1f, 0x8b}, p[:2], "a pprof profile is gzipped")
}

// TestBenchBadBaseline: a baseline that is no report stops the bench
// before it runs, naming the file (and where in it, for bad JSON), rather
// than comparing nothing and reporting no regressions.
func TestBenchBadBaseline(t *testing.T) {
	p := filepath.Join(t.TempDir(), "result.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"name": "link-flap", "passed": true}`), 0o644))
	code, out, stderr := run(t, "bench", "--only", "datapath", "--out", t.TempDir(), "--baseline", p)
	assert.NotEqual(t, 0, code, out)
	assert.Contains(t, stderr, "baseline: "+p+": no metrics; want a bench.json written by lattice-lab bench")

	require.NoError(t, os.WriteFile(p, []byte("{\n  \"cpus\": 2,\n}\n"), 0o644))
	code, out, stderr = run(t, "bench", "--only", "datapath", "--out", t.TempDir(), "--baseline", p)
	assert.NotEqual(t, 0, code, out)
	assert.Contains(t, stderr, "baseline: "+p+":3:1: invalid character '}'")
}

// TestBenchUsageErrors: bad flag values are refused before anything runs
// (--runs -1 used to panic after the benchmark).
func TestBenchUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"negative runs", []string{"--only", "connect", "--runs", "-1"}, `--runs -1: want at least 1`},
		{"zero runs", []string{"--only", "connect", "--runs", "0"}, `--runs 0: want at least 1`},
		{"negative tolerance", []string{"--only", "connect", "--tolerance", "-0.1"}, `--tolerance -0.1: must not be negative`},
		{"zero bytes", []string{"--only", "datapath", "--bytes", "0"}, `--bytes 0B: want more than 0`},
		{"empty out", []string{"--only", "connect", "--out", ""}, `--out: name a directory`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"bench"}, tc.args...)
			if !slices.Contains(args, "--out") { // were it to run, it writes here
				args = append(args, "--out", t.TempDir())
			}
			code, out, stderr := run(t, args...)
			assert.Equal(t, 2, code, "%s\n%s", out, stderr)
			assert.Contains(t, stderr, tc.want)
			assert.Empty(t, out, "nothing runs")
		})
	}
}
