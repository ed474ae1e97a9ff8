package bpf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const unprivEnv = "LATTICE_BPF_TEST_UNPRIV"

// runUnprivChild tries New as an unprivileged user and prints whether
// the error wraps ErrUnavailable.
func runUnprivChild() int {
	_, err := New(Config{Interface: "lo", Policy: nil})
	fmt.Printf("unavailable=%v err=%v\n", errors.Is(err, ErrUnavailable), err)
	return 0
}

// TestUnprivilegedIsUnavailable runs New as uid 65534 without
// capabilities: the error wraps ErrUnavailable, for the iptables
// fallback.
func TestUnprivilegedIsUnavailable(t *testing.T) {
	requireKernel(t)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	bin := filepath.Join(dir, "bpf.test")
	src, err := os.Open(os.Args[0])
	require.NoError(t, err)
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, err)
	require.NoError(t, dst.Close())

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), unprivEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "unavailable=true err=bpf: create rules map: eBPF egress filter unavailable: ", "child said: %s", out)
}
