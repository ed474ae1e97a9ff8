package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/wgdev"
)

// wgIn runs wg(8) in a namespace and returns its output.
func wgIn(t *testing.T, netns string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=/run/netns/" + netns, "wg"}, args...)...).CombinedOutput()
	return string(out), err
}

// TestUpWireGuardTools: two `lattice up` nodes in two network namespaces;
// wg(8) shows each one's interface with the other as a peer, a recent
// handshake and the direct path's address as the endpoint; `wg set`
// changes what the device does (seen back through wg show and the node's
// status socket, and ping still crosses); `wg set` of an endpoint is
// refused, since the node's paths choose it. Node A runs --wireguard auto,
// which says in the log what it chose.
func TestUpWireGuardTools(t *testing.T) {
	needRoot(t, "ip", "nsenter", "ping", "wg")
	dir, bin, nsA, nsB, ctrlURL := startNetnsPair(t, "lw", 214)
	suffix := fmt.Sprintf("%d", os.Getpid()%100000)
	ifA, ifB := "lwga"+suffix, "lwgb"+suffix

	upRE := regexp.MustCompile(`up: \S+ \(\S+\) at ([0-9.]+)/10`)
	var addrs []string
	var procs []*proc
	for i, ns := range []string{nsA, nsB} {
		mode := "auto"
		ifname := ifA
		if i == 1 {
			mode, ifname = "userspace", ifB
		}
		p := startIn(t, ns, bin, "up", "--name", fmt.Sprintf("wg-%d", i), "--control", ctrlURL, "--wireguard", mode,
			"--token-file", filepath.Join(dir, "token"), "--state-dir", filepath.Join(dir, ns), "--interface", ifname)
		require.Eventually(t, func() bool { return upRE.MatchString(p.text()) }, 20*time.Second, 50*time.Millisecond, "%s", p.text())
		addrs = append(addrs, upRE.FindStringSubmatch(p.text())[1])
		procs = append(procs, p)
	}
	if err := wgdev.ProbeKernel(t.Context()); err != nil {
		assert.Contains(t, procs[0].text(), "kernel WireGuard unavailable", "auto says it fell back")
	} else {
		assert.Contains(t, procs[0].text(), "kernel WireGuard up", "auto chose the kernel")
	}
	require.Eventually(t, func() bool {
		st, _, err := fetchStatus(context.Background(), filepath.Join(dir, nsA, "lattice.sock"))
		return err == nil && len(st.Peers) == 1 && st.Peers[0].Path == "direct"
	}, 20*time.Second, 100*time.Millisecond, "node A never got a direct path")

	pubB, err := wgIn(t, nsB, "show", ifB, "public-key")
	require.NoError(t, err, pubB)
	pubB = strings.TrimSpace(pubB)
	var show string
	require.Eventually(t, func() bool {
		show, err = wgIn(t, nsA, "show", ifA)
		return err == nil && strings.Contains(show, "latest handshake:")
	}, 15*time.Second, 100*time.Millisecond, "wg show %s: %v\n%s", ifA, err, show)
	t.Logf("wg show %s:\n%s", ifA, show)
	assert.Contains(t, show, "interface: "+ifA)
	assert.Contains(t, show, "peer: "+pubB)
	assert.Contains(t, show, "allowed ips: "+addrs[1]+"/32")
	assert.Regexp(t, `endpoint: (10\.214\.0\.2|127\.0\.0\.1):\d+`, show, "the direct path (wireguard-go) or the bridge's socket (kernel)")
	assert.Regexp(t, `transfer: [0-9.]+ \w*B received, [0-9.]+ \w*B sent`, show)

	// wg set changes the device, and the node reads the change back.
	out, err := wgIn(t, nsA, "set", ifA, "peer", pubB, "persistent-keepalive", "7", "allowed-ips", addrs[1]+"/32,10.99.0.0/24")
	require.NoError(t, err, out)
	show, err = wgIn(t, nsA, "show", ifA, "dump")
	require.NoError(t, err, show)
	assert.Regexp(t, regexp.QuoteMeta(pubB)+`\t\S+\t\S+\t`+regexp.QuoteMeta(addrs[1])+`/32,10\.99\.0\.0/24\t\d+\t\d+\t\d+\t7\n`, show)
	ping, err := exec.Command("nsenter", "--net=/run/netns/"+nsA, "ping", "-c", "3", "-W", "2", addrs[1]).CombinedOutput()
	require.NoError(t, err, "ping after wg set: %s", ping)
	assert.Contains(t, string(ping), "3 received")
	st, _, err := fetchStatus(context.Background(), filepath.Join(dir, nsA, "lattice.sock"))
	require.NoError(t, err)
	require.Len(t, st.Peers, 1)
	assert.WithinDuration(t, time.Now(), st.Peers[0].LastHandshake, 3*time.Minute, "the node reads the handshake back from the device")

	// On wireguard-go (node B's), an address endpoint is refused: the
	// node's paths choose it.
	pubA, err := wgIn(t, nsA, "show", ifA, "public-key")
	require.NoError(t, err, pubA)
	out, err = wgIn(t, nsB, "set", ifB, "peer", strings.TrimSpace(pubA), "endpoint", "10.214.0.1:1")
	assert.Error(t, err, "wg set endpoint: %s", out)
	// The node logs the refusal after it has answered wg, so the line
	// may land a moment after wg returns.
	assert.Eventually(t, func() bool { return strings.Contains(procs[1].text(), "is not a lattice peer") },
		5*time.Second, 20*time.Millisecond, "the node logs why: %s", procs[1].text())
}

// TestUpWireGuardKernel: `lattice up --wireguard kernel`. Where the kernel
// has WireGuard, node A's interface is kernel WireGuard reached through
// the bridge: wg show lists the peer with a handshake and the bridge's
// loopback socket as its endpoint, and ping crosses. Where it has not,
// up fails at once and says so (and the kernel subtest skips, saying why).
func TestUpWireGuardKernel(t *testing.T) {
	needRoot(t, "ip", "nsenter", "ping", "wg")
	dir, bin, nsA, nsB, ctrlURL := startNetnsPair(t, "lk", 215)
	suffix := fmt.Sprintf("%d", os.Getpid()%100000)
	probe := wgdev.ProbeKernel(t.Context())
	if probe != nil {
		t.Run("refused", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+nsA, bin, "up", "--name", "kern", "--control", ctrlURL,
				"--wireguard", "kernel", "--token-file", filepath.Join(dir, "token"), "--state-dir", "mem:", "--interface", "lka"+suffix).CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "up should fail: %s", out)
			assert.Contains(t, string(out), "kernel WireGuard unavailable")
		})
	}
	t.Run("kernel", func(t *testing.T) {
		if probe != nil {
			t.Skipf("this kernel has no WireGuard: %v", probe)
		}
		upRE := regexp.MustCompile(`up: \S+ \(\S+\) at ([0-9.]+)/10`)
		var addrs []string
		for i, ns := range []string{nsA, nsB} {
			mode, ifname := "kernel", "lka"+suffix
			if i == 1 {
				mode, ifname = "userspace", "lkb"+suffix
			}
			p := startIn(t, ns, bin, "up", "--name", fmt.Sprintf("kern-%d", i), "--control", ctrlURL, "--wireguard", mode,
				"--token-file", filepath.Join(dir, "token"), "--state-dir", filepath.Join(dir, ns), "--interface", ifname)
			require.Eventually(t, func() bool { return upRE.MatchString(p.text()) }, 20*time.Second, 50*time.Millisecond, "%s", p.text())
			addrs = append(addrs, upRE.FindStringSubmatch(p.text())[1])
		}
		var show string
		var err error
		require.Eventually(t, func() bool {
			show, err = wgIn(t, nsA, "show", "lka"+suffix)
			return err == nil && strings.Contains(show, "latest handshake:")
		}, 20*time.Second, 100*time.Millisecond, "wg show: %v\n%s", err, show)
		assert.Regexp(t, `endpoint: 127\.0\.0\.1:\d+`, show, "the bridge's socket")
		out, err := exec.Command("nsenter", "--net=/run/netns/"+nsA, "ping", "-c", "3", "-W", "2", addrs[1]).CombinedOutput()
		require.NoError(t, err, "ping over kernel WireGuard: %s", out)
		assert.Contains(t, string(out), "3 received")
	})
}
