package runner

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/latticelab/lattice/internal/testbin"
	"github.com/stretchr/testify/require"
)

// TestCheckPeer: a live lab's socket admits this process's user and, as
// root, refuses a client run as nobody, whatever the socket's mode.
func TestCheckPeer(t *testing.T) {
	// The client run as nobody is this test binary; the socket sits
	// beside its copy, where nobody may reach it.
	exe := testbin.ForAnyone(t, "client")
	path := filepath.Join(filepath.Dir(exe), "live.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	require.NoError(t, err)
	defer ln.Close()
	require.NoError(t, os.Chmod(path, 0o777))
	verdict := func(dial func()) error {
		done := make(chan error, 1)
		go func() {
			c, err := ln.AcceptUnix()
			if err != nil {
				done <- err
				return
			}
			defer c.Close()
			done <- checkPeer(c)
		}()
		dial()
		return <-done
	}
	require.NoError(t, verdict(func() {
		c, err := net.Dial("unix", path)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
	}), "this process's own user")

	if os.Getuid() != 0 {
		t.Skip("dialing as another user needs root")
	}
	err = verdict(func() {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), dialUnixEnv+"="+path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	})
	require.EqualError(t, err, "peer uid 65534 is not 0")
}

// dialUnixEnv names the socket a copy of this binary dials (and waits on
// until the other end closes) instead of running the tests.
const dialUnixEnv = "LATTICE_TEST_DIAL_UNIX"

func dialUnixIfAsked() {
	path := os.Getenv(dialUnixEnv)
	if path == "" {
		return
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		os.Exit(2)
	}
	_, _ = c.Read(make([]byte, 1))
	os.Exit(0)
}
