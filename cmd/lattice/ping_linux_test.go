package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPingKernelInNamespaces: `lattice ping` from one kernel-mode node to
// another in its own namespace gets replies over the direct path, each
// with its round trip, stops on -c, and --until-direct stops at the
// first direct reply; an unknown peer is an error naming it.
func TestPingKernelInNamespaces(t *testing.T) {
	needRoot(t, "ip", "nsenter")
	dir, bin, nsA, nsB, ctrlURL := startNetnsPair(t, "lp", 218)
	upRE := regexp.MustCompile(`up: \S+ \(\S+\) at ([0-9.]+)/10`)
	for i, ns := range []string{nsA, nsB} {
		p := startIn(t, ns, bin, "up", "--name", fmt.Sprintf("node-%d", i), "--control", ctrlURL,
			"--token-file", filepath.Join(dir, "token"), "--state-dir", filepath.Join(dir, ns), "--interface", "lattice0")
		require.Eventually(t, func() bool { return upRE.MatchString(p.text()) }, 20*time.Second, 50*time.Millisecond)
	}
	ping := func(args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"--net=/run/netns/" + nsA, bin, "ping", "--state-dir", filepath.Join(dir, nsA),
			"--interval", "200ms"}, args...)...).CombinedOutput()
		return string(out), err
	}
	var out string
	require.Eventually(t, func() bool {
		o, err := ping("-c", "1", "--until-direct", "node-1")
		out = o
		return err == nil
	}, 30*time.Second, 500*time.Millisecond, "never a direct reply: %s", out)
	assert.Regexp(t, `pong from node-1 \(100\.\S+\) seq=1 via direct 10\.218\.0\.2:\d+ in [0-9.]+(µs|ms)`, out)

	out, err := ping("-c", "3", "node-1")
	require.NoError(t, err, out)
	assert.Len(t, regexp.MustCompile(`pong from node-1 .* via direct`).FindAllString(out, -1), 3, out)
	assert.Contains(t, out, "--- node-1: 3 sent, 3 replies, 3 direct")

	out, err = ping("-c", "1", "nobody")
	require.Error(t, err)
	assert.Contains(t, out, `no peer "nobody"`)
}

// TestPingRelayThenDirect: with lazy nodes the peer is relayed until
// traffic flows; ping's traffic starts the direct negotiation, and ping
// reports the upgrade and stops (--until-direct) at the first direct
// reply.
func TestPingRelayThenDirect(t *testing.T) {
	needRoot(t, "ip", "nsenter")
	dir := t.TempDir()
	bin := filepath.Join(dir, "lattice")
	sh(t, "go", "build", "-o", bin, ".")
	suffix := fmt.Sprintf("%d", os.Getpid()%100000)
	nsA, nsB := "lq-a-"+suffix, "lq-b-"+suffix
	for _, ns := range []string{nsA, nsB} {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	vethA, vethB := "lqa"+suffix, "lqb"+suffix
	sh(t, "ip", "link", "add", vethA, "type", "veth", "peer", "name", vethB)
	sh(t, "ip", "link", "set", vethA, "netns", nsA)
	sh(t, "ip", "link", "set", vethB, "netns", nsB)
	sh(t, "ip", "-n", nsA, "addr", "add", "10.219.0.1/24", "dev", vethA)
	sh(t, "ip", "-n", nsB, "addr", "add", "10.219.0.2/24", "dev", vethB)
	sh(t, "ip", "-n", nsA, "link", "set", vethA, "up")
	sh(t, "ip", "-n", nsB, "link", "set", vethB, "up")

	secret := filepath.Join(dir, "relay.secret")
	require.NoError(t, os.WriteFile(secret, []byte("ping-test-relay-secret-0123456789abcdef\n"), 0o600))
	rl := startIn(t, nsA, bin, "relay", "--listen", "10.219.0.1:4443", "--secret-file", secret)
	fpRE := regexp.MustCompile(`fingerprint ([0-9a-f]+)`)
	require.Eventually(t, func() bool { return fpRE.MatchString(rl.text()) }, 20*time.Second, 50*time.Millisecond)
	fp := fpRE.FindStringSubmatch(rl.text())[1]

	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("ping-test-token-0123456789\n"), 0o600))
	ctrl := startIn(t, nsA, bin, "control", "--embedded-nats", "--nats-listen", "10.219.0.1:4222", "--listen-http", "",
		"--token-file", filepath.Join(dir, "token"), "--data-dir", filepath.Join(dir, "control"),
		"--relay", "10.219.0.1:4443,"+fp, "--relay-secret-file", secret)
	joinRE := regexp.MustCompile(`control: nodes join with --control '(tls://[^']+)'`)
	require.Eventually(t, func() bool { return joinRE.MatchString(ctrl.text()) }, 20*time.Second, 50*time.Millisecond)
	ctrlURL := joinRE.FindStringSubmatch(ctrl.text())[1]

	upRE := regexp.MustCompile(`up: \S+ \(\S+\) at ([0-9.]+)/10`)
	for i, ns := range []string{nsA, nsB} {
		p := startIn(t, ns, bin, "up", "--name", fmt.Sprintf("node-%d", i), "--control", ctrlURL, "--lazy",
			"--token-file", filepath.Join(dir, "token"), "--state-dir", filepath.Join(dir, ns), "--interface", "lattice0")
		require.Eventually(t, func() bool { return upRE.MatchString(p.text()) }, 20*time.Second, 50*time.Millisecond)
	}
	sockA := filepath.Join(dir, nsA, "lattice.sock")
	require.Eventually(t, func() bool {
		st, err := findPeer(context.Background(), sockA, "node-1")
		return err == nil && st.Path == "relay"
	}, 20*time.Second, 100*time.Millisecond, "node-1 never showed up relayed")

	out, err := exec.Command("nsenter", "--net=/run/netns/"+nsA, bin, "ping", "--state-dir", filepath.Join(dir, nsA),
		"--interval", "200ms", "-c", "50", "--until-direct", "node-1").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "PING node-1 (")
	assert.Contains(t, string(out), ") over relay")
	assert.Contains(t, string(out), "path upgraded: relay -> direct")
	assert.Regexp(t, `pong from node-1 \S+ seq=\d+ via direct 10\.219\.0\.2:\d+ in `, string(out))
	t.Logf("%s", out)
}
