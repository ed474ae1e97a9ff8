package bpf

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/latticelab/lattice/internal/testbin"
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
	bin := testbin.ForAnyone(t, "bpf.test")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), unprivEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "unavailable=true err=bpf: create rules map: eBPF egress filter unavailable: ", "child said: %s", out)
}
