package runsc

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)

// staticAgent builds testdata/agent without cgo: a static binary.
func staticAgent(t *testing.T) string {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "runsc-agent")
		if err != nil {
			agentErr = err
			return
		}
		agentPath = filepath.Join(dir, "agent")
		cmd := exec.Command("go", "build", "-o", agentPath, "./testdata/agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = err
			agentPath = string(out)
		}
	})
	require.NoError(t, agentErr, agentPath)
	return agentPath
}

func TestFind(t *testing.T) {
	_, err := Find(filepath.Join(t.TempDir(), "runsc"))
	require.ErrorIs(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), "CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@"+GVisorVersion)

	text := filepath.Join(t.TempDir(), "runsc")
	require.NoError(t, os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755))
	_, err = Find(text)
	assert.ErrorContains(t, err, "is not an executable")

	if sh, err := exec.LookPath("sh"); err == nil {
		_, err = Find(sh)
		require.ErrorIs(t, err, ErrDynamic, "sh is dynamically linked on every distribution we run on")
		assert.Contains(t, err.Error(), "fork/exec /proc/self/exe")
	}
	got, err := Find(staticAgent(t))
	require.NoError(t, err, "a static binary is accepted")
	assert.Equal(t, staticAgent(t), got)
}

func TestSpec(t *testing.T) {
	agent := staticAgent(t)
	rootfs := t.TempDir()
	oci, err := Spec{ID: "a", Args: []string{agent, "hello", "0"}, Env: []string{"X=1"}}.oci(rootfs)
	require.NoError(t, err)
	b, err := json.Marshal(oci)
	require.NoError(t, err)
	js := string(b)
	assert.NotContains(t, js, `"network"`, "no network namespace: --network=host means the pod's")
	assert.Contains(t, js, `"capabilities":{"bounding":[],"effective":[],"inheritable":[],"permitted":[],"ambient":[]}`)
	assert.Contains(t, js, `"noNewPrivileges":true`)
	assert.Contains(t, js, `"root":{"path":"`+rootfs+`","readonly":true}`)
	assert.Equal(t, ociUser{UID: 65534, GID: 65534}, oci.Process.User)
	assert.Equal(t, []string{"/lattice/agent/agent", "hello", "0"}, oci.Process.Args)
	assert.Contains(t, oci.Process.Env, "X=1")
	var dests []string
	for _, m := range oci.Mounts {
		dests = append(dests, m.Destination)
		if m.Type == "bind" {
			assert.Contains(t, m.Options, "ro", "%s is read-only", m.Destination)
		}
	}
	assert.Contains(t, dests, "/lattice/agent/agent")
	assert.Contains(t, dests, "/usr")
	for _, d := range dests {
		assert.False(t, strings.HasPrefix(d, "/var") || strings.HasPrefix(d, "/root") || strings.HasPrefix(d, "/run"), "host %s must stay invisible", d)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"relative", []string{"agent"}, `agent "agent": want an absolute path`},
		{"none", nil, `agent "": want an absolute path`},
		{"missing", []string{"/no/such/agent"}, "agent binary: stat /no/such/agent: no such file"},
		{"not executable", []string{writeFile(t, "data", 0o644)}, "is not an executable file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Spec{ID: "a", Args: tc.args}.oci(t.TempDir())
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func writeFile(t *testing.T, name string, mode os.FileMode) string {
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte("x"), mode))
	return p
}

// needRunsc skips where runsc cannot run: no root or no runsc.
func needRunsc(t *testing.T) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run runsc")
	}
	if _, err := Find(""); err != nil {
		t.Skipf("needs runsc: %v", err)
	}
	m, err := NewManager(Config{StateDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	return m
}

// TestRun: the agent runs as PID 1 under gVisor as nobody, its exit code
// comes back, and the container is gone afterwards.
func TestRun(t *testing.T) {
	m := needRunsc(t)
	var out, errOut bytes.Buffer
	code, err := m.Run(t.Context(), Spec{ID: "hello", Args: []string{staticAgent(t), "hello", "7"}}, Stdio{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err, errOut.String())
	assert.Equal(t, 7, code)
	assert.Contains(t, out.String(), "pid 1 uid 65534")
	ids, err := m.List()
	require.NoError(t, err)
	assert.Empty(t, ids, "the container is deleted after it exits")
}

// TestRunStaleAndCancel: a second container under a live one's name is
// refused with the fix; cancelling stops the agent (SIGTERM: 143).
func TestRunStaleAndCancel(t *testing.T) {
	m := needRunsc(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		code, err := m.Run(ctx, Spec{ID: "sleeper", Args: []string{staticAgent(t), "sleep"}}, Stdio{Stderr: &errOut})
		assert.NoError(t, err)
		done <- code
	}()
	require.Eventually(t, func() bool { return m.exists("sleeper") }, 20*time.Second, 50*time.Millisecond, "container starts")
	_, err := m.Run(t.Context(), Spec{ID: "sleeper", Args: []string{staticAgent(t), "hello", "0"}}, Stdio{})
	require.ErrorIs(t, err, ErrExists)
	assert.Contains(t, err.Error(), "delete --force sleeper")
	cancel()
	select {
	case code := <-done:
		assert.Equal(t, 128+15, code)
	case <-time.After(20 * time.Second):
		t.Fatal("the agent did not stop")
	}
	assert.False(t, m.exists("sleeper"))
}

func TestNewManagerErrors(t *testing.T) {
	_, err := NewManager(Config{Binary: staticAgent(t), Platform: "kvm", StateDir: t.TempDir()})
	assert.ErrorContains(t, err, `platform "kvm": want systrap or ptrace`)
	_, err = NewManager(Config{Binary: "/no/runsc"})
	assert.ErrorIs(t, err, ErrNotFound)
}
