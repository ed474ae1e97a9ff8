package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/lab/pcapng"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// runCmd runs the lattice-lab command tree in-process and returns what it
// printed on stdout and stderr.
func runCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// assertLines checks that out has a line matching each pattern.
func assertLines(t *testing.T, out string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		assert.Regexp(t, regexp.MustCompile(`(?m)^`+p+`$`), out)
	}
}

func TestRun(t *testing.T) {
	out, stderr, err := runCmd(t, "run", "--transfer-mib", "4")
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out, stderr)
	assert.Empty(t, stderr, "no warnings expected")

	const ms = `[0-9.]+(ms|s)`
	assertLines(t, out,
		`\[1/6\] build topology`,
		`  ✓ 5 networks, 4 hosts, 4 routers in `+ms,
		`  ✓ laptop: ping server `+ms,
		`  ✓ desktop: ping server `+ms,
		`  ✓ tablet: ping server `+ms,
		`  ✓ home-nat: endpoint-independent mapping, address-and-port-dependent filtering \(as configured\)  `+ms,
		`  ✓ office-nat: address-and-port-dependent mapping, address-and-port-dependent filtering \(as configured\)  `+ms,
		`  ✓ flat-nat behind carrier-nat: endpoint-independent mapping, address-dependent filtering \(as configured\)  `+ms,
		`  ✓ laptop: 4 MiB to server in `+ms+`, [0-9.]+ Gbit/s`,
		`  ✓ desktop: 4 MiB to server in `+ms+`, [0-9.]+ Gbit/s`,
		`  ✓ tablet: 4 MiB to server in `+ms+`, [0-9.]+ Gbit/s`,
		// Each client's datagrams leave through its outermost NAT.
		`  ✓ laptop: udp echo 10× avg `+ms+`, server saw 203\.0\.113\.10:\d+`,
		`  ✓ desktop: udp echo 10× avg `+ms+`, server saw 203\.0\.113\.11:\d+`,
		`  ✓ tablet: udp echo 10× avg `+ms+`, server saw 203\.0\.113\.12:\d+`,
		`  router +profile +forwarded +translated +mappings +NAT drops +firewall drops +other drops`,
		// Every router forwarded and translated traffic; symmetric and
		// port-restricted NATs dropped discovery's filtering probes.
		`  home-nat +port-restricted-cone +[1-9]\d* +[1-9]\d* +\d+ +[1-9]\d* +0 +0`,
		`  office-nat +symmetric +[1-9]\d* +[1-9]\d* +\d+ +[1-9]\d* +0 +0`,
		`  carrier-nat +cgnat +[1-9]\d* +[1-9]\d* +\d+ +[1-9]\d* +0 +0`,
		`  flat-nat +full-cone +[1-9]\d* +[1-9]\d* +\d+ +0 +0 +0`,
		`  interfaces: \d+ frames dropped by full receive queues, 0 by links`,
		`✓ all 6 steps passed in `+ms,
	)
	assert.NotContains(t, out, "✗")
	assert.NotContains(t, out, "captures", "no --capture, no capture files")
}

func TestRunCapture(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pcap") // run creates it
	out, stderr, err := runCmd(t, "run", "--transfer-mib", "1", "--capture", dir)
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out, stderr)
	assertLines(t, out,
		`  ✓ capturing 5 networks to `+regexp.QuoteMeta(dir),
		`  e\.g\. tshark -r `+regexp.QuoteMeta(filepath.Join(dir, "internet.pcapng")),
	)
	for _, name := range []string{"internet", "home", "office", "carrier", "flat"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".pcapng")
			assertLines(t, out, `  `+regexp.QuoteMeta(path)+`  [0-9.]+ MiB`)
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			r, err := pcapng.NewReader(f)
			require.NoError(t, err)
			packets := 0
			for {
				_, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err, "packet %d", packets+1)
				packets++
			}
			assert.Positive(t, packets)
			require.Len(t, r.Interfaces(), 1, "one capture point: the network")
			assert.Equal(t, name, r.Interfaces()[0].Name)
			assert.Equal(t, pcapng.LinkTypeEthernet, r.Interfaces()[0].LinkType)
		})
	}
}

// TestExecuteErrors checks what the process would print and exit with when
// a run cannot start or is cut short.
func TestExecuteErrors(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name       string
		ctx        context.Context
		args       []string
		wantCode   int
		wantStderr string
		wantStdout string // a line the output must contain, if set
	}{
		{
			name:     "topology file",
			args:     []string{"run", "lab.yaml"},
			wantCode: exitUsage,
			wantStderr: `lattice-lab: run "lab.yaml": topology files are not supported yet; run without arguments for the built-in default topology
Run 'lattice-lab run --help' for usage.
`,
		},
		{
			name:     "unknown command",
			args:     []string{"runn"},
			wantCode: exitUsage,
			wantStderr: `lattice-lab: unknown command "runn"
Run 'lattice-lab --help' for usage.
`,
		},
		{
			name:     "unknown flag",
			args:     []string{"run", "--bogus"},
			wantCode: exitUsage,
			wantStderr: `lattice-lab: unknown flag: --bogus
Run 'lattice-lab run --help' for usage.
`,
		},
		{
			name:     "empty transfer",
			args:     []string{"run", "--transfer-mib", "0"},
			wantCode: exitUsage,
			wantStderr: `lattice-lab: --transfer-mib 0: must be at least 1
Run 'lattice-lab run --help' for usage.
`,
		},
		{
			name:       "timeout",
			args:       []string{"run", "--timeout", "1ns"},
			wantCode:   exitFailure,
			wantStderr: "lattice-lab: run: ping server: timed out after 1ns (raise --timeout)\n",
			wantStdout: "  ✗ timed out after 1ns (raise --timeout)\n",
		},
		{
			name:       "interrupted",
			ctx:        cancelled,
			args:       []string{"run"},
			wantCode:   exitInterrupted,
			wantStderr: "lattice-lab: interrupted (context canceled)\n",
			wantStdout: "  ✗ context canceled\n",
		},
		{
			name:       "help",
			args:       []string{"run", "--help"},
			wantCode:   exitOK,
			wantStdout: "Examples:\n  # The whole run, with a 64 MiB transfer per client\n  lattice-lab run\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			var stdout, stderr bytes.Buffer
			code := execute(ctx, tt.args, &stdout, &stderr)
			assert.Equal(t, tt.wantCode, code, "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
			assert.Equal(t, tt.wantStderr, stderr.String())
			assert.Contains(t, stdout.String(), tt.wantStdout)
		})
	}
}
