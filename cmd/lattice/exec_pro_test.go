//go:build pro

package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/meshtest"
)

// executeIn is execute with stdin.
func executeIn(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetIn(stdin)
	return cli.Execute(ctx, root, args, stdout, stderr)
}

// TestSandboxExec: exec runs CMD as a running sandbox's agent, with its
// identity and proxies, passes --stdin on, prints CMD's output and exits
// with its code; bad input is a usage error that says what to do.
func TestSandboxExec(t *testing.T) {
	w := webPeer(t)
	state := t.TempDir()
	out, errOut, stop := start(t, "sandbox", "start", "--name", "agent", "--server-url", w.NATSURL, "--token", meshtest.Token,
		"--state-dir", state, "--listen-addr", "127.0.0.1", "--socks5", "127.0.0.1:0", "--isolation", "proxy")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "control socket") }, 30*time.Second, 20*time.Millisecond, "%s%s", out, errOut)

	exec := func(stdin string, args ...string) (string, string, int) {
		var o, e strings.Builder
		code := executeIn(t.Context(), append([]string{"sandbox", "exec", "--state-dir", state}, args...), strings.NewReader(stdin), &o, &e)
		return o.String(), e.String(), code
	}
	o, e, code := exec("ignored", "--", "sh", "-c", `echo "$LATTICE_SANDBOX ${ALL_PROXY%%://*}"; cat; echo oops >&2; exit 5`)
	assert.Equal(t, 5, code, e)
	assert.Equal(t, "agent socks5h\n", o, "no --stdin: CMD reads nothing")
	assert.Equal(t, "oops\n", e)

	o, e, code = exec("piped", "--stdin", "--", "cat")
	assert.Equal(t, exitOK, code, e)
	assert.Equal(t, "piped", o)

	_, e, code = exec("", "--", "no-such-agent")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, e, "no-such-agent")

	_, e, code = exec("", "cat")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, e, "put the command after --")
	assert.Equal(t, exitOK, stop())

	_, e, code = exec("", "--", "true")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, e, "sandbox not reachable")
}
