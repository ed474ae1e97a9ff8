package runsc

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	fakeOnce sync.Once
	fakePath string
	fakeErr  error
)

// staticFake builds testdata/fakerunsc without cgo, as Find wants runsc.
func staticFake(t *testing.T) string {
	t.Helper()
	fakeOnce.Do(func() {
		dir, err := buildDir("runsc-fake")
		if err != nil {
			fakeErr = err
			return
		}
		fakePath = filepath.Join(dir, "runsc")
		cmd := exec.Command("go", "build", "-o", fakePath, "./testdata/fakerunsc")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fakeErr = err
			fakePath = string(out)
		}
	})
	require.NoError(t, fakeErr, fakePath)
	return fakePath
}

// TestManageNoAnswer: a runsc management command that never answers is
// killed after the Manager's bound (or when the caller's context ends),
// with an error naming the command, its container and the bound, and
// leaves no process behind; a child holding its output does not hold the
// caller.
func TestManageNoAnswer(t *testing.T) {
	const bound = 300 * time.Millisecond
	for _, tc := range []struct {
		name    string
		hang    string // the subcommand that never answers
		child   string // FAKE_RUNSC_CHILD
		timeout time.Duration
		call    func(ctx context.Context, m *Manager) error
		wantErr string
		// escaped: the child left its process group, so it outlives the
		// kill (the test ends it); it must not hold the caller.
		escaped bool
	}{
		{name: "delete", hang: "delete", call: func(_ context.Context, m *Manager) error { return m.Delete("sb-1") },
			wantErr: "runsc: delete --force sb-1: no answer in 300ms: killed"},
		{name: "delete, state hangs", hang: "state", call: func(_ context.Context, m *Manager) error { return m.Delete("sb-1") },
			wantErr: "runsc: state sb-1: no answer in 300ms: killed"},
		{name: "list", hang: "list", call: func(_ context.Context, m *Manager) error { _, err := m.List(); return err },
			wantErr: "runsc: list --quiet: no answer in 300ms: killed"},
		{name: "manager close", hang: "list", call: func(_ context.Context, m *Manager) error { return m.Close() },
			wantErr: "runsc: list --quiet: no answer in 300ms: killed"},
		{name: "kill", hang: "kill", call: func(ctx context.Context, m *Manager) error { return m.kill(ctx, "sb-1", "KILL") },
			wantErr: "runsc: kill --all sb-1 KILL: no answer in 300ms: killed"},
		{name: "prepare, state hangs", hang: "state", call: func(_ context.Context, m *Manager) error {
			_, err := m.Prepare(Spec{ID: "sb-1"}, Stdio{})
			return err
		}, wantErr: "runsc: state sb-1: no answer in 300ms: killed"},
		{name: "delete, child in its group", hang: "delete", child: "group", call: func(_ context.Context, m *Manager) error { return m.Delete("sb-1") },
			wantErr: "runsc: delete --force sb-1: no answer in 300ms: killed"},
		{name: "list, child escaped", hang: "list", child: "escaped", escaped: true, call: func(_ context.Context, m *Manager) error { _, err := m.List(); return err },
			wantErr: "runsc: list --quiet: no answer in 300ms: killed"},
		{name: "kill, caller's context ends first", hang: "kill", timeout: time.Hour, call: func(ctx context.Context, m *Manager) error {
			ctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			return m.kill(ctx, "sb-1", "TERM")
		}, wantErr: "runsc: kill --all sb-1 TERM: context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pids := t.TempDir()
			t.Setenv("FAKE_RUNSC_HANG", tc.hang)
			t.Setenv("FAKE_RUNSC_CHILD", tc.child)
			t.Setenv("FAKE_RUNSC_PIDS", pids)
			m, err := NewManager(Config{Binary: staticFake(t), StateDir: t.TempDir()})
			require.NoError(t, err)
			m.cmdTimeout = bound
			if tc.timeout != 0 {
				m.cmdTimeout = tc.timeout
			}
			// runsc keeps files named after a live container here: Delete
			// and Prepare then ask it.
			require.NoError(t, os.WriteFile(filepath.Join(m.stateRoot(), "sb-1_sandbox:sb-1.state"), nil, 0o600))

			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- tc.call(t.Context(), m) }()
			select {
			case err = <-done:
			case <-time.After(bound + cmdWaitDelay + 10*time.Second):
				t.Fatalf("%s did not return", tc.name)
			}
			took := time.Since(start)
			require.EqualError(t, err, tc.wantErr)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.GreaterOrEqual(t, took, bound, "killed before its bound")
			assert.Less(t, took, bound+cmdWaitDelay+2*time.Second, "returned long after its bound")

			entries, err := os.ReadDir(pids)
			require.NoError(t, err)
			want := 1
			if tc.child != "" {
				want = 2
			}
			require.Len(t, entries, want, "the fake's hanging processes")
			for _, e := range entries {
				role, num, _ := strings.Cut(e.Name(), ".")
				pid, err := strconv.Atoi(num)
				require.NoError(t, err)
				if tc.escaped && role == "child" {
					t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
					continue
				}
				assert.Eventually(t, func() bool { return !running(pid) }, 5*time.Second, 20*time.Millisecond, "process %d is left", pid)
			}
		})
	}
}

// TestRunLeftHoldingItsOutput: a process of a wedged sandbox that
// outlives `runsc run` and holds the output pipes (the agent's Stdio is
// not a file) does not hold Run: it returns runsc's exit soon after.
func TestRunLeftHoldingItsOutput(t *testing.T) {
	const delay = 300 * time.Millisecond
	pids := t.TempDir()
	t.Setenv("FAKE_RUNSC_LEAVE", "1")
	t.Setenv("FAKE_RUNSC_PIDS", pids)
	m, err := NewManager(Config{Binary: staticFake(t), StateDir: t.TempDir()})
	require.NoError(t, err)
	m.runWaitDelay = delay
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := m.Run(t.Context(), Spec{ID: "sb-2", Args: []string{staticFake(t)}}, Stdio{Stdout: &out, Stderr: &out})
		done <- err
	}()
	defer func() {
		entries, _ := os.ReadDir(pids)
		for _, e := range entries {
			if _, num, ok := strings.Cut(e.Name(), "."); ok {
				if pid, err := strconv.Atoi(num); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}()
	select {
	case err = <-done:
	case <-time.After(delay + 10*time.Second):
		t.Fatal("Run did not return while a process left behind held its output")
	}
	// The pipes were closed on it: an I/O error, not a hang.
	require.ErrorIs(t, err, exec.ErrWaitDelay)
}

// running reports whether pid is a live process (not gone, not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, rest, _ := bytes.Cut(b, []byte(") "))
	return len(rest) > 0 && rest[0] != 'Z'
}
