package sandbox_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/sandbox"
)

// TestSpareInitKilled: an agent's init made ahead that dies before Run
// (here killed) is replaced by one made on the spot; the agent runs with
// its stdio, environment, working directory and exit code as ever, and a
// new spare is made for the next Run.
func TestSpareInitKilled(t *testing.T) {
	d := startNamespacePod(t, newMesh(t))
	pid := sandbox.SpareInitPID(d)
	require.NotZero(t, pid, "Start makes a spare init")
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))

	out, err := os.Create(filepath.Join(t.TempDir(), "stdout"))
	require.NoError(t, err)
	defer out.Close()
	var errOut strings.Builder
	code, err := d.Run(t.Context(), []string{"sh", "-c", `echo "$LATTICE_SANDBOX $(pwd)"; echo oops >&2; exit 5`}, sandbox.Stdio{Stdout: out, Stderr: &errOut})
	require.NoError(t, err)
	assert.Equal(t, 5, code, "the agent's exit code")
	wd, err := os.Getwd()
	require.NoError(t, err)
	b, err := os.ReadFile(out.Name())
	require.NoError(t, err)
	assert.Equal(t, "agent "+wd+"\n", string(b), "stdout, a file, written by the agent itself")
	assert.Equal(t, "oops\n", errOut.String())

	next := sandbox.SpareInitPID(d)
	require.NotZero(t, next, "Run made the next spare")
	assert.NotEqual(t, pid, next)
	var got strings.Builder
	code, err = d.Run(t.Context(), []string{"sh", "-c", "cat; exit 3"}, sandbox.Stdio{Stdin: strings.NewReader("piped"), Stdout: &got, Stderr: &got})
	require.NoError(t, err)
	assert.Equal(t, 3, code)
	assert.Equal(t, "piped", got.String())
}

// TestSpareInitClosed: Close stops a spare no agent has used: its process
// is reaped, its TUN device closed (the device would keep its network
// namespace alive) and its resolv.conf left nowhere.
func TestSpareInitClosed(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the init makes its resolv.conf
	m := newMesh(t)
	cfg := m.config(t, "agent", t.TempDir())
	cfg.SOCKS5, cfg.HTTPProxy = "", ""
	tuns := tunFDs(t)
	d, err := sandbox.NewPod(cfg)
	require.NoError(t, err)
	require.NoError(t, d.Start(t.Context()))
	pid := sandbox.SpareInitPID(d)
	require.NotZero(t, pid, "Start makes a spare init")
	assert.Greater(t, tunFDs(t), tuns, "the spare's gateway holds its TUN device")
	require.NoError(t, d.Close())
	_, err = os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	assert.ErrorIs(t, err, os.ErrNotExist, "the spare init is reaped")
	assert.Equal(t, tuns, tunFDs(t), "the spare's TUN device is closed")
	leftovers, _ := filepath.Glob(filepath.Join(tmp, "lattice-resolv-*"))
	assert.Empty(t, leftovers)
	assert.Zero(t, sandbox.SpareInitPID(d), "no spare after Close")
}

// TestSpareInitGivesBackPages: a spare init, idle until an agent comes,
// gives back the pages of its binary its start mapped (internal/pagetrim).
func TestSpareInitGivesBackPages(t *testing.T) {
	d := startNamespacePod(t, newMesh(t))
	pid := sandbox.SpareInitPID(d)
	require.NotZero(t, pid, "Start makes a spare init")
	first := rssFileKiB(t, pid)
	require.Eventually(t, func() bool { return rssFileKiB(t, pid) <= first/2 }, 10*time.Second, 50*time.Millisecond,
		"the spare's RssFile stays at %d kB or more (%d kB at first)", first/2, first)
	var got strings.Builder
	code, err := d.Run(t.Context(), []string{"sh", "-c", "echo ok"}, sandbox.Stdio{Stdout: &got, Stderr: &got})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "ok\n", got.String(), "the spare still runs an agent")
}

// rssFileKiB is process pid's RssFile in kB.
func rssFileKiB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no RssFile in /proc/%d/status", pid)
	return 0
}

// tunFDs counts this process's open TUN devices.
func tunFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && l == "/dev/net/tun" {
			n++
		}
	}
	return n
}

// TestAgentStartTooBig: a command line and environment too big for one
// message to the init is refused with an error that says so, and the
// next Run works.
func TestAgentStartTooBig(t *testing.T) {
	d := startNamespacePod(t, newMesh(t))
	big := strings.Repeat("x", 100<<10)
	_, err := d.Run(t.Context(), []string{"true", big, big, big}, sandbox.Stdio{})
	require.ErrorContains(t, err, "more than a message to the init can hold")
	code, err := d.Run(t.Context(), []string{"sh", "-c", "exit 6"}, sandbox.Stdio{})
	require.NoError(t, err)
	assert.Equal(t, 6, code)
}

// TestAgentWorkingDirectoryHidden: the agent's working directory is the
// sandbox's by path, in the agent's mount namespace: under the state dir
// it is the empty tmpfs that hides it there (an inherited one would be
// the directory itself, credentials and all).
func TestAgentWorkingDirectoryHidden(t *testing.T) {
	m := newMesh(t)
	state := t.TempDir()
	cfg := m.config(t, "agent", state)
	cfg.SOCKS5, cfg.HTTPProxy = "", ""
	d := startPod(t, cfg)
	require.FileExists(t, filepath.Join(state, "credentials.json"))
	t.Chdir(state)
	var out strings.Builder
	code, err := d.Run(t.Context(), []string{"sh", "-c", "pwd; ls -A"}, sandbox.Stdio{Stdout: &out, Stderr: &out})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	real, err := filepath.EvalSymlinks(state)
	require.NoError(t, err)
	assert.Equal(t, real+"\n", out.String(), "the working directory, empty")
}
