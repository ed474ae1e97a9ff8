//go:build pro

package main

import (
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/meshtest"
)

func webPeer(t *testing.T) *meshtest.World {
	t.Helper()
	w := meshtest.Start(t)
	web := w.Peer(t, "web")
	web.ServeHTTP(t, 8080, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello from web") }))
	return w
}

// TestSandboxRun: CMD runs with the proxies in its environment, reaches a
// peer by name with plain curl, and its exit code becomes lattice's.
func TestSandboxRun(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl (make deps installs it)")
	}
	w := webPeer(t)
	// The agent's output and the sandbox's logs arrive on different
	// goroutines: the buffers must be safe for that.
	var out, errOut syncBuffer
	code := execute(t.Context(), []string{"sandbox", "run", "--mode", "pod", "--name", "runner", "--server-url", w.NATSURL,
		"--token", meshtest.Token, "--state-dir", "mem:", "--listen-addr", "127.0.0.1", "--",
		"sh", "-c", `for i in $(seq 100); do curl -sf --max-time 5 http://web:8080/ && exit 3; sleep 0.1; done; exit 1`}, &out, &errOut)
	assert.Equal(t, 3, code, "CMD's exit code; stderr:\n%s", errOut.String())
	assert.Equal(t, "hello from web", out.String())
	assert.NotContains(t, errOut.String(), "lattice: ", "an exit code is not an error")
}

// TestSandboxAgent: agent status, resolve and dial against a running
// sandbox.
func TestSandboxAgent(t *testing.T) {
	w := webPeer(t)
	state := t.TempDir()
	out, errOut, stop := start(t, "sandbox", "start", "--name", "agent", "--server-url", w.NATSURL, "--token", meshtest.Token,
		"--state-dir", state, "--listen-addr", "127.0.0.1", "--socks5", "127.0.0.1:0")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "control socket") }, 30*time.Second, 20*time.Millisecond, "%s%s", out, errOut)

	agent := func(args ...string) (string, string, int) {
		var o, e strings.Builder
		code := execute(t.Context(), append([]string{"sandbox", "agent", "--state-dir", state}, args...), &o, &e)
		return o.String(), e.String(), code
	}
	o, e, code := agent("status")
	require.Equal(t, exitOK, code, e)
	assert.Regexp(t, regexp.MustCompile(`agent \(\S+\) at 100\.\S+, mode pod`), o)
	assert.Contains(t, o, "policy: none (allow all but loopback, link-local, metadata and host addresses)")
	assert.Contains(t, o, "socks5: 127.0.0.1:")

	o, e, code = agent("resolve", "web.lattice")
	require.Equal(t, exitOK, code, e)
	assert.Regexp(t, `web\.lattice: 100\.\S+ \(overlay, peer web\)`, o)

	require.Eventually(t, func() bool {
		o, _, code = agent("dial", "web:8080")
		return code == exitOK
	}, 20*time.Second, 100*time.Millisecond)
	assert.Contains(t, o, "connected to web:8080")

	_, e, code = agent("dial", "169.254.169.254:80")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, e, "denied by metadata")
	assert.Equal(t, exitOK, stop())

	_, e, code = agent("status")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, e, "is it running?")
}
