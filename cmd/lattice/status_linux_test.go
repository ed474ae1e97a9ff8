package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/node"
)

// TestStatusKernelPeerStops runs control and two kernel-mode `lattice
// up` nodes in two network namespaces. Node A's status shows B online
// with none of A's ICE candidates on its overlay address; when B gets
// SIGTERM, A shows it offline within a second and a TCP connect to B
// fails at once (no route to host); B restarted is online again.
func TestStatusKernelPeerStops(t *testing.T) {
	needRoot(t, "ip", "nsenter", "bash")
	dir, bin, nsA, nsB, ctrlURL := startNetnsPair(t, "ls", 214)

	upRE := regexp.MustCompile(`up: \S+ \(\S+\) at ([0-9.]+)/10`)
	up := func(ns, name string) (*proc, string) {
		p := startIn(t, ns, bin, "up", "--name", name, "--control", ctrlURL,
			"--token-file", filepath.Join(dir, "token"), "--state-dir", filepath.Join(dir, ns), "--interface", "lattice0")
		require.Eventually(t, func() bool { return upRE.MatchString(p.text()) }, 20*time.Second, 50*time.Millisecond)
		return p, upRE.FindStringSubmatch(p.text())[1]
	}
	_, addrA := up(nsA, "node-a")
	pb, addrB := up(nsB, "node-b")
	socketA := filepath.Join(dir, nsA, "lattice.sock")
	peerB := func() (node.PeerStatus, bool) {
		st, _, err := fetchStatus(context.Background(), socketA)
		if err != nil || len(st.Peers) != 1 {
			return node.PeerStatus{}, false
		}
		return st.Peers[0], true
	}
	var st node.PeerStatus
	require.Eventually(t, func() bool {
		var ok bool
		st, ok = peerB()
		return ok && st.Path == node.PathDirect
	}, 20*time.Second, 50*time.Millisecond, "node A never got a direct path to B")
	assert.True(t, st.Online)
	require.NotEmpty(t, st.ICE.LocalCandidates)
	for _, c := range st.ICE.LocalCandidates {
		assert.NotContains(t, c, addrA, "an ICE candidate on the overlay interface")
	}

	// SIGTERM: offline within a second, connects refused at once.
	start := time.Now()
	require.NoError(t, pb.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool {
		st, ok := peerB()
		return ok && !st.Online && st.Path == node.PathOffline
	}, time.Second, 10*time.Millisecond, "B not shown offline within 1s of SIGTERM")
	t.Logf("offline %v after SIGTERM", time.Since(start))
	connect := exec.Command("nsenter", "--net=/run/netns/"+nsA, "timeout", "5", "bash", "-c", "exec 3<>/dev/tcp/"+addrB+"/7")
	start = time.Now()
	out, err := connect.CombinedOutput()
	took := time.Since(start)
	require.Error(t, err, "a connect to a stopped peer")
	assert.Contains(t, string(out), "No route to host")
	assert.Less(t, took, time.Second, "the connect hung: %s", out)

	// Back with the same state: online again, once the old process has
	// let go of the UDP port.
	pb.waitExit(t, 10*time.Second)
	_, addrB2 := up(nsB, "node-b")
	assert.Equal(t, addrB, addrB2, "same identity, same address")
	require.Eventually(t, func() bool {
		st, ok := peerB()
		return ok && st.Online
	}, 20*time.Second, 50*time.Millisecond, "B never came back online")
}
