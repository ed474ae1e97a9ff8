package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// needRoot skips a test that needs root and the named tools, saying which
// is missing.
func needRoot(t testing.TB, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, TUN devices)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("needs /dev/net/tun")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make deps installs it)", tool)
		}
	}
}

func sh(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
}

// proc is a background lattice process whose output is collected.
type proc struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	out strings.Builder
}

// waitExit waits up to d for the process to end by itself (after a
// signal the test sent).
func (p *proc) waitExit(t *testing.T, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-done
		t.Fatalf("%s did not exit within %v", p.cmd.Args, d)
	}
}

func (p *proc) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func startIn(t *testing.T, netns, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + netns, bin}, args...)...)
	p := &proc{cmd: cmd}
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = w, w
	require.NoError(t, cmd.Start())
	w.Close()
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s %s output:\n%s", netns, args[0], p.text())
		}
	})
	return p
}

// TestUpKernelInNamespaces runs control and two `lattice up` nodes with
// kernel TUN interfaces in two network namespaces joined by a veth pair,
// and pings one node's overlay address from the other.
func TestUpKernelInNamespaces(t *testing.T) {
	needRoot(t, "ip", "nsenter", "ping")
	dir, bin, nsA, nsB, ctrlURL := startNetnsPair(t, "lt", 213)

	upRE := regexp.MustCompile(`up: \S+ \(\S+\) at ([0-9.]+)/10`)
	var addrs []string
	for i, ns := range []string{nsA, nsB} {
		p := startIn(t, ns, bin, "up", "--name", fmt.Sprintf("node-%d", i), "--control", ctrlURL,
			"--token-file", filepath.Join(dir, "token"), "--state-dir", filepath.Join(dir, ns), "--interface", "lattice0")
		require.Eventually(t, func() bool { return upRE.MatchString(p.text()) }, 20*time.Second, 50*time.Millisecond)
		addrs = append(addrs, upRE.FindStringSubmatch(p.text())[1])
	}

	// Node A sees node B on a direct path.
	require.Eventually(t, func() bool {
		st, _, err := fetchStatus(context.Background(), filepath.Join(dir, nsA, "lattice.sock"))
		return err == nil && len(st.Peers) == 1 && st.Peers[0].Path == "direct"
	}, 20*time.Second, 100*time.Millisecond, "node A never got a direct path")

	out, err := exec.Command("nsenter", "--net=/run/netns/"+nsA, "ping", "-c", "3", "-W", "2", addrs[1]).CombinedOutput()
	require.NoError(t, err, "ping over the kernel interfaces: %s", out)
	require.Contains(t, string(out), "3 received")

	raw, err := exec.Command(bin, "status", "--state-dir", filepath.Join(dir, nsA), "--json").Output()
	require.NoError(t, err)
	var st statusReply
	require.NoError(t, json.Unmarshal(raw, &st))
	require.Positive(t, st.Peers[0].TxDirect)

	// Control is off loopback: a node refuses plaintext to it (before it
	// dials: the refusal comes from the URL) and a certificate that is not
	// the pinned one, and says how to fix either.
	wrongPin := strings.Repeat("00", 32)
	for _, tc := range []struct {
		name    string
		control string
		code    int
		want    string
	}{
		{"plaintext", "nats://10.213.0.1:4222", exitUsage, "plaintext control connection to a non-loopback address"},
		{"wrong pin", "tls://10.213.0.1:4222?fingerprint=" + wrongPin, exitFailure, "does not match the pinned fingerprint " + wrongPin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+nsB, bin, "up", "--name", "intruder",
				"--control", tc.control, "--token-file", filepath.Join(dir, "token"), "--state-dir", "mem:", "--userspace")
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "up should fail: %s", out)
			assert.Equal(t, tc.code, ee.ExitCode(), "%s", out)
			assert.Contains(t, string(out), tc.want)
		})
	}
}

// startNetnsPair builds the lattice binary and two network namespaces,
// TAG-a-PID and TAG-b-PID, joined by a veth pair on 10.OCTET.0.0/24 (.1
// in A, .2 in B), and runs control with embedded NATS on 10.OCTET.0.1:4222
// in A. DIR/token holds the join token; DIR/NS is each node's state dir.
// Control listens off loopback, so it makes a self-signed certificate;
// ctrlURL is its NATS URL pinning that certificate.
func startNetnsPair(t *testing.T, tag string, octet int) (dir, bin, nsA, nsB, ctrlURL string) {
	t.Helper()
	dir = t.TempDir()
	bin = filepath.Join(dir, "lattice")
	sh(t, "go", "build", "-o", bin, ".")

	suffix := fmt.Sprintf("%d", os.Getpid()%100000)
	nsA, nsB = tag+"-a-"+suffix, tag+"-b-"+suffix
	for _, ns := range []string{nsA, nsB} {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	vethA, vethB := tag+"a"+suffix, tag+"b"+suffix
	sh(t, "ip", "link", "add", vethA, "type", "veth", "peer", "name", vethB)
	sh(t, "ip", "link", "set", vethA, "netns", nsA)
	sh(t, "ip", "link", "set", vethB, "netns", nsB)
	sh(t, "ip", "-n", nsA, "addr", "add", fmt.Sprintf("10.%d.0.1/24", octet), "dev", vethA)
	sh(t, "ip", "-n", nsB, "addr", "add", fmt.Sprintf("10.%d.0.2/24", octet), "dev", vethB)
	sh(t, "ip", "-n", nsA, "link", "set", vethA, "up")
	sh(t, "ip", "-n", nsB, "link", "set", vethB, "up")

	tokens := writeFile(t, "tokens", "netns-test-token-0123456789\n", 0o600)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("netns-test-token-0123456789\n"), 0o600))
	ctrl := startIn(t, nsA, bin, "control", "--embedded-nats", "--nats-listen", fmt.Sprintf("10.%d.0.1:4222", octet), "--listen-http", "",
		"--token-file", tokens, "--data-dir", filepath.Join(dir, "control"))
	require.Eventually(t, func() bool { return strings.Contains(ctrl.text(), "control: nodes join with") }, 20*time.Second, 50*time.Millisecond)
	m := regexp.MustCompile(`control: nodes join with --control '(tls://[^']+)'`).FindStringSubmatch(ctrl.text())
	require.NotNil(t, m, "control's output: %s", ctrl.text())
	return dir, bin, nsA, nsB, m[1]
}
