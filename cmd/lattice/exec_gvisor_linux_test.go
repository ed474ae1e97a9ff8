//go:build pro

package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/meshtest"
)

// TestSandboxGVisorExec: `sandbox start --mode gvisor` without an agent
// keeps phase 1 up and serves the control socket; `sandbox exec` runs
// agents in runsc through it, one after another, each reaching a peer by
// name and passing its exit code on; SIGTERM stops the daemon and takes
// wg0 and the socket with it.
func TestSandboxGVisorExec(t *testing.T) {
	p := newPod(t, 9)
	w := meshtest.StartOn(t, p.host)
	web := w.Peer(t, "web")
	web.ServeHTTP(t, 8080, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello from web") }))
	agent := buildAgent(t)
	state := t.TempDir()

	self, err := os.Executable()
	require.NoError(t, err)
	daemon := exec.Command("nsenter", "--net=/run/netns/"+p.ns, self, "sandbox", "start", "--mode", "gvisor", "--name", "agent",
		"--server-url", w.NATSURL, "--token", meshtest.Token, "--state-dir", state, "--listen-addr", p.addr.String())
	daemon.Env = append(os.Environ(), execMainEnv+"=1")
	var out, errOut syncBuffer
	daemon.Stdout, daemon.Stderr = &out, &errOut
	require.NoError(t, daemon.Start())
	done := make(chan error, 1)
	go func() { done <- daemon.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = daemon.Process.Kill()
			<-done
		}
	})
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "control socket") }, time.Minute, 50*time.Millisecond,
		"%s%s", &out, &errOut)
	assert.Contains(t, out.String(), "mode gvisor")

	run := func(args ...string) (string, string, int) {
		var o, e strings.Builder
		code := execute(t.Context(), append([]string{"sandbox", "exec", "--state-dir", state, "--"}, args...), &o, &e)
		return o.String(), e.String(), code
	}
	o, e, code := run(agent, "fetch", "http://web:8080/", "exit", "3")
	assert.Equal(t, 3, code, "stdout:\n%s\nstderr:\n%s\ndaemon:\n%s", o, e, &errOut)
	assert.Contains(t, o, "fetch http://web:8080/: hello from web")
	o, e, code = run(agent, "gvisor")
	assert.Equal(t, exitOK, code, "a second agent after the first: %s%s", o, e)
	assert.Contains(t, o, "gvisor: kernel log says gVisor")

	require.NoError(t, daemon.Process.Signal(syscall.SIGTERM))
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the daemon did not stop on SIGTERM:\n%s", &errOut)
	}
	stopped = true
	require.NoError(t, err, "%s", &errOut)
	o2, err := p.inPod("ip", "link", "show", "wg0")
	assert.Error(t, err, "wg0 is gone: %s", o2)
	assert.NoFileExists(t, filepath.Join(state, "sandbox.sock"))
}
