package main

import (
	"fmt"
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
