package egress

import (
	"bufio"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/edition"
)

// The child process: Start an Enforcer and wait to be killed.
const childEnv = "LATTICE_EGRESS_TEST_CHILD"

func runChildIfAsked() (int, bool) {
	if os.Getenv(childEnv) == "" {
		return 0, false
	}
	web := netip.MustParseAddr(os.Getenv(childEnv + "_WEB"))
	ns := os.Getenv(childEnv)
	if ns == "here" {
		ns = "" // started in the namespace already
	}
	e, err := Start(Config{
		Peers:     func() map[string][]netip.Addr { return map[string][]netip.Addr{"web": {web}} },
		Interface: "vc", Netns: ns, Policy: os.Getenv(childEnv + "_POLICY"), Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Backend: os.Getenv(childEnv + "_BACKEND"), FailClosed: os.Getenv(childEnv+"_FAILCLOSED") != "",
		PinRoot: os.Getenv(childEnv + "_PIN"), Overlay: netip.MustParsePrefix(os.Getenv(childEnv + "_OVERLAY")),
	})
	if err != nil {
		fmt.Println("error:", err)
		return 1, true
	}
	fmt.Println("started", e.Backend())
	select {}
}

// startChild runs the child and waits until its filter is in place.
func startChild(t *testing.T, p pair, backend, policy, pin string, failClosed bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+p.client, childEnv+"_POLICY="+policy, childEnv+"_BACKEND="+backend,
		childEnv+"_PIN="+pin, childEnv+"_OVERLAY="+p.overlay().String(), childEnv+"_WEB="+p.addr(2).String())
	if failClosed {
		cmd.Env = append(cmd.Env, childEnv+"_FAILCLOSED=1")
	}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "child: %q", line)
	require.True(t, strings.HasPrefix(line, "started "), "child: %q", line)
	return cmd
}

// TestFailClosedKill: a node killed with -9 under FailClosed leaves its
// filter denying (and allowing what it allowed); the next Start replaces
// it without a gap and its Close removes it; Clear removes one left
// behind. Without FailClosed the eBPF filter goes with the process.
func TestFailClosedKill(t *testing.T) {
	requireRoot(t)
	p := newPair(t)
	listen(t, p, 8080)
	web, db := netip.AddrPortFrom(p.addr(2), 8080), netip.AddrPortFrom(p.addr(3), 8080)
	kill := func(cmd *exec.Cmd) {
		t.Helper()
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
	}
	for _, backend := range backends() {
		t.Run(backend, func(t *testing.T) {
			pin := mountBPF(t)
			pol := writePolicy(t, p, t.TempDir(), basePolicy)
			kill(startChild(t, p, backend, pol, pin, true))
			assert.False(t, canConnect(t, p, db), "still denied after kill -9")
			assert.True(t, canConnect(t, p, web), "still allowed after kill -9")
			if backend == EBPF {
				assert.FileExists(t, filepath.Join(pin, "vc", "link"), "pinned")
			}

			// The next run takes over, then goes cleanly.
			e := start(t, p, Config{Policy: pol, Backend: backend, PinRoot: pin, FailClosed: true})
			assert.False(t, canConnect(t, p, db), "denied by the next run")
			require.NoError(t, e.Close())
			assert.True(t, canConnect(t, p, db), "the earlier run's filter was replaced, not left behind")
			assert.NoFileExists(t, filepath.Join(pin, "vc", "link"))

			// Left behind again, and cleared by hand.
			kill(startChild(t, p, backend, pol, pin, true))
			require.False(t, canConnect(t, p, db))
			var removed []string
			in(t, p.client, func() (err error) {
				removed, err = Clear("vc", pin)
				return err
			})
			assert.NotEmpty(t, removed)
			assert.True(t, canConnect(t, p, db), "cleared")
		})
	}
	if !backendsHave(EBPF) {
		return
	}
	t.Run("ebpf not fail closed", func(t *testing.T) {
		pol := writePolicy(t, p, t.TempDir(), basePolicy)
		kill(startChild(t, p, EBPF, pol, filepath.Join(t.TempDir(), "none"), false))
		assert.Eventually(t, func() bool { return canConnect(t, p, db) }, 5*time.Second, 50*time.Millisecond,
			"without FailClosed the filter goes with the process")
	})
}

func backendsHave(b string) bool {
	for _, x := range backends() {
		if x == b {
			return true
		}
	}
	return false
}

// TestFallbackToIPTables: where the kernel refuses BPF (here: root
// without CAP_BPF, CAP_SYS_ADMIN and CAP_PERFMON, dropped from the
// bounding set), Auto enforces the policy with iptables and the log says
// why.
func TestFallbackToIPTables(t *testing.T) {
	requireRoot(t)
	if !edition.Pro() {
		t.Skip("in the community edition Auto is iptables without trying eBPF (TestEnforce)")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux) to drop the BPF capabilities")
	}
	p := newPair(t)
	listen(t, p, 8080)
	pol := writePolicy(t, p, t.TempDir(), basePolicy)
	ns := p.client[strings.LastIndexByte(p.client, '/')+1:]
	cmd := exec.Command("ip", "netns", "exec", ns, "setpriv", "--bounding-set", "-bpf,-sys_admin,-perfmon", "--", os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=here", childEnv+"_POLICY="+pol, childEnv+"_BACKEND="+Auto,
		childEnv+"_PIN=", childEnv+"_OVERLAY="+p.overlay().String(), childEnv+"_WEB="+p.addr(2).String())
	var stderr logBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) // its chains go with the namespace
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "child: %q %s", line, stderr.String())
	assert.Equal(t, "started iptables\n", line)
	assert.Contains(t, stderr.String(), "eBPF egress filter unavailable here; enforcing the policy with iptables")
	assert.True(t, canConnect(t, p, netip.AddrPortFrom(p.addr(2), 8080)), "web")
	assert.False(t, canConnect(t, p, netip.AddrPortFrom(p.addr(3), 8080)), "db")
}
