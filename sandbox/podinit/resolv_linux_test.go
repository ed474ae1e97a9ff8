package podinit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// resolvProbeArg0 re-executes the test binary in a user and mount
// namespace of its own, where it binds a resolv.conf as the agent's init
// does and prints what /etc/resolv.conf then reads.
const resolvProbeArg0 = "lattice-resolv-probe"

func init() {
	if len(os.Args) == 2 && os.Args[0] == resolvProbeArg0 {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			fmt.Println("making mounts private:", err)
			os.Exit(1)
		}
		if err := bindResolvConf(os.Args[1]); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		b, err := os.ReadFile("/etc/resolv.conf")
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Print(string(b))
		os.Exit(0)
	}
}

// TestResolvConfNamesNoFile: the agent's resolv.conf is bound over
// /etc/resolv.conf without a file of it in any directory, so an init
// killed at any moment leaves none behind, and a TMPDIR that cannot be
// written does not stop the agent from starting.
func TestResolvConfNamesNoFile(t *testing.T) {
	if _, err := os.Stat("/etc/resolv.conf"); err != nil {
		t.Skip("the host has no /etc/resolv.conf to bind over")
	}
	tmp := t.TempDir()
	require.NoError(t, os.Chmod(tmp, 0o500))
	exe, err := os.Executable()
	require.NoError(t, err)
	const content = "nameserver 100.64.0.53\nsearch mesh.test\n"
	cmd := exec.Command(exe)
	cmd.Args = []string{resolvProbeArg0, content}
	cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Join(tmp, "missing"))
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "binding the agent's resolv.conf:\n%s", out)
	assert.Equal(t, content, string(out), "what /etc/resolv.conf reads in the agent's mount namespace")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left)
}
