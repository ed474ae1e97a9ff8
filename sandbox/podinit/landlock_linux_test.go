package podinit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// landlockProbeArg0 re-executes the test binary as a process that
// confines itself as the agent's init does and then tries the state dir
// with no mount hiding it: what the agent would meet if a mount trick had
// exposed the directory.
const landlockProbeArg0 = "lattice-landlock-probe"

func init() {
	if len(os.Args) == 3 && os.Args[0] == landlockProbeArg0 {
		os.Exit(landlockProbe(os.Args[1], os.Args[2]))
	}
}

// landlockProbe prints "ok CHECK" for what must work and what must fail
// and did, "WRONG CHECK: why" otherwise.
func landlockProbe(state, other string) int {
	// Landlock confines the thread (init() runs locked to the main
	// thread already; this says so).
	runtime.LockOSThread()
	say := func(name string, ok bool, err error) {
		if ok {
			fmt.Printf("ok %s: %v\n", name, err)
		} else {
			fmt.Printf("WRONG %s: %v\n", name, err)
		}
	}
	mnt := filepath.Join(other, "mnt")
	// Without Landlock this process may mount (root of its user and mount
	// namespaces), so the refusal below is Landlock's.
	err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=4k")
	say("mount before", err == nil, err)
	_ = unix.Unmount(mnt, 0)
	start, cpu := time.Now(), threadCPU()
	abi, err := restrictLandlock([]string{state})
	say(fmt.Sprintf("restrict (ABI %d, %v, %v of CPU)", abi, time.Since(start), threadCPU()-cpu), err == nil && abi > 0, err)
	denied := func(name string, err error) {
		say(name, errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EXDEV), err)
	}
	_, err = os.ReadFile(filepath.Join(state, "credentials.json"))
	denied("read credentials", err)
	err = os.WriteFile(filepath.Join(state, "credentials.json"), []byte("x"), 0o600)
	denied("overwrite credentials", err)
	err = os.WriteFile(filepath.Join(state, "planted"), []byte("x"), 0o600)
	denied("plant a file", err)
	denied("remove the audit log", os.Remove(filepath.Join(state, "audit.jsonl")))
	denied("rename the audit log", os.Rename(filepath.Join(state, "audit.jsonl"), filepath.Join(other, "audit.jsonl")))
	denied("hard link out", os.Link(filepath.Join(state, "credentials.json"), filepath.Join(other, "creds")))
	link := filepath.Join(other, "link")
	err = os.Symlink(filepath.Join(state, "credentials.json"), link)
	say("symlink made", err == nil, err)
	_, err = os.ReadFile(link)
	denied("read through a symlink", err)
	denied("mount after", unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=4k"))
	b, err := os.ReadFile(filepath.Join(other, "data"))
	say("read elsewhere", err == nil && string(b) == "data", err)
	err = os.WriteFile(filepath.Join(other, "new"), []byte("x"), 0o600)
	say("write elsewhere", err == nil, err)
	_, err = os.ReadDir("/")
	say("list /", err == nil, err)
	_, err = exec.Command("true").Output()
	say("exec", err == nil, err)
	return 0
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// TestLandlockDeniesStateDir: confined as the agent is, a process with
// the state dir in plain view (no tmpfs over it) cannot read, write,
// remove, rename or link out its files, nor reach them through a symlink,
// nor mount anything; what lies beside the state dir it keeps.
func TestLandlockDeniesStateDir(t *testing.T) {
	if LandlockABI() == 0 {
		t.Skip("the kernel has no Landlock (not built or not enabled at boot)")
	}
	root := t.TempDir()
	state, other := filepath.Join(root, "state"), filepath.Join(root, "other")
	for _, d := range []string{state, other, filepath.Join(other, "mnt")} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	for _, f := range []struct{ path, data string }{
		{filepath.Join(state, "credentials.json"), `{"private_key":"secret"}`},
		{filepath.Join(state, "audit.jsonl"), "{}\n"},
		{filepath.Join(other, "data"), "data"},
	} {
		require.NoError(t, os.WriteFile(f.path, []byte(f.data), 0o600))
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Args = []string{landlockProbeArg0, state, other}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	out, err := cmd.CombinedOutput()
	t.Logf("probe:\n%s", out)
	require.NoError(t, err)
	for _, c := range []string{"mount before", "restrict", "read credentials", "overwrite credentials", "plant a file",
		"remove the audit log", "rename the audit log", "hard link out", "symlink made", "read through a symlink",
		"mount after", "read elsewhere", "write elsewhere", "list /", "exec"} {
		assert.Contains(t, string(out), "ok "+c, c)
	}
	assert.NotContains(t, string(out), "WRONG")
	b, err := os.ReadFile(filepath.Join(state, "credentials.json"))
	require.NoError(t, err)
	assert.Equal(t, `{"private_key":"secret"}`, string(b), "the credentials are intact")
	assert.FileExists(t, filepath.Join(state, "audit.jsonl"))
	assert.NoFileExists(t, filepath.Join(state, "planted"))
}

// TestLandlockAllowed: the rules are the siblings of each directory on the
// way to a denied path, never the path itself nor its ancestors.
func TestLandlockAllowed(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/state/sub", "a/b", "c"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o700))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "a/file"), nil, 0o600))
	require.NoError(t, os.Symlink("a/state", filepath.Join(root, "link")))
	rules, err := landlockAllowed([]string{filepath.Join(root, "a/state"), filepath.Join(root, "a/state/")})
	require.NoError(t, err)
	got := map[string]bool{}
	for _, r := range rules {
		if strings.HasPrefix(r.path, root) {
			got[strings.TrimPrefix(r.path, root)] = r.dir
		}
		assert.False(t, r.path == root || strings.HasPrefix(root, r.path+"/") || r.path == "/", "an ancestor %s", r.path)
	}
	assert.Equal(t, map[string]bool{"/a/b": true, "/a/file": false, "/c": true}, got)
	_, err = landlockAllowed([]string{"relative/state"})
	assert.ErrorContains(t, err, `"relative/state" is not an absolute path`)
}
