package netns_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/internal/netns"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// needRoot skips when the test cannot create namespaces.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip to create a network namespace")
	}
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %v: %s", args, out)
}

// newNS creates a named namespace with its loopback up, removed at cleanup,
// and returns its path.
func newNS(t *testing.T) string {
	t.Helper()
	needRoot(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "lattice-test-" + hex.EncodeToString(b)
	ip(t, "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ip(t, "-n", name, "link", "set", "lo", "up")
	return filepath.Join("/run/netns", name)
}

// threadNS is the inode of the calling thread's network namespace; the
// caller must hold its thread.
func threadNS(t *testing.T) uint64 {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat("/proc/thread-self/ns/net", &st))
	return st.Ino
}

func fileIno(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(p, &st))
	return st.Ino
}

func TestDoRunsInNamespace(t *testing.T) {
	path := newNS(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := threadNS(t)

	var inside uint64
	var ifnames []string
	var ln net.Listener
	err := netns.Do(path, func() error {
		var st syscall.Stat_t
		if err := syscall.Stat("/proc/thread-self/ns/net", &st); err != nil {
			return err
		}
		inside = st.Ino
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, i := range ifs {
			ifnames = append(ifnames, i.Name)
		}
		ln, err = net.Listen("tcp4", "127.0.0.1:0")
		return err
	})
	require.NoError(t, err)
	defer ln.Close()

	assert.Equal(t, fileIno(t, path), inside, "fn must run in the namespace at path")
	assert.Equal(t, []string{"lo"}, ifnames, "a fresh namespace has only its loopback")
	assert.Equal(t, before, threadNS(t), "the caller's thread must stay in its namespace")

	// The listener lives in the namespace: unreachable from here, reachable
	// from inside, though the thread that made it is gone.
	addr := ln.Addr().String()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	if c, err := net.DialTimeout("tcp4", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("dialled %s from the host namespace; the listener must live in %s", addr, path)
	}
	require.NoError(t, netns.Do(path, func() error {
		c, err := net.DialTimeout("tcp4", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	}), "dial the listener from inside its namespace")
	select {
	case err := <-accepted:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("listener accepted nothing")
	}
}

func TestDoReturnsFnError(t *testing.T) {
	path := newNS(t)
	errFn := errors.New("fn failed")
	err := netns.Do(path, func() error { return errFn })
	assert.ErrorIs(t, err, errFn)
}

func TestDoBadPath(t *testing.T) {
	needRoot(t)
	notNS := filepath.Join(t.TempDir(), "plain")
	require.NoError(t, os.WriteFile(notNS, nil, 0o600))
	tests := []struct {
		name    string
		path    string
		wantErr error
	}{
		{"missing", filepath.Join(t.TempDir(), "nope"), os.ErrNotExist},
		{"not a namespace", notNS, syscall.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			err := netns.Do(tt.path, func() error { called = true; return nil })
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.wantErr)
			assert.Contains(t, err.Error(), tt.path)
			assert.False(t, called, "fn must not run outside the namespace")
		})
	}
}
