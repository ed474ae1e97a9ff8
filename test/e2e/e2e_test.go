package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
)

// setup builds the image (once per package) and returns a context bounding
// the rest of the test.
func setup(t *testing.T) (context.Context, string) {
	t.Helper()
	img := latticeImage(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx, img
}

// TestImage: the image is the binaries (lattice, and lattice-sandbox,
// which `lattice sandbox` becomes) and the data directory on nothing
// (FROM scratch), runs as nobody and says which edition it carries.
func TestImage(t *testing.T) {
	ctx, img := setup(t)
	in, err := dockerClient(t).ImageInspect(ctx, img)
	require.NoError(t, err)
	assert.Equal(t, "65534:65534", in.Config.User)
	assert.Equal(t, []string{"/lattice"}, in.Config.Entrypoint)
	assert.Equal(t, "pro", in.Config.Labels["io.lattice.edition"])
	assert.Len(t, in.RootFS.Layers, 3, "FROM scratch: /lattice, /lattice-sandbox and /var/lib/lattice, nothing else")
	assert.Less(t, in.Size, int64(64<<20), "image size")
}

// TestContainerExitsEarly: a container that exits before it is ready is
// reported at once, with its exit code and its own words, not after the
// start timeout.
func TestContainerExitsEarly(t *testing.T) {
	ctx, img := setup(t)
	nw := newNetwork(ctx, t)
	start := time.Now()
	_, err := startBox(ctx, t, img, boxSpec{
		name: "no-token", nets: []*testcontainers.DockerNetwork{nw}, alias: "no-token", volume: newVolume(ctx, t, "no-token"),
		args:  []string{"sandbox", "start", "--name", "no-token", "--server-url", "tls://control:4222", "--state-dir", stateDir},
		ready: `sandbox: control socket`,
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exited, exit code 2")
	assert.Contains(t, err.Error(), "a join token is required", "the container's logs are in the error")
	assert.Less(t, time.Since(start), startTimeout/2)
}

// TestSandboxesDirect: two pod-mode sandboxes with no privilege at all on
// one Docker network register with control, and the agent's HTTP request,
// sent through its SOCKS5 proxy, crosses the overlay to the other
// sandbox's forward; both report a direct path, and traffic flows over it.
func TestSandboxesDirect(t *testing.T) {
	ctx, img := setup(t)
	nw := newNetwork(ctx, t)
	w := newWorld(ctx, t, img, nw)
	web := w.startSandbox(ctx, t, sandboxSpec{name: "web", net: nw, volume: newVolume(ctx, t, "web"),
		forwardTo: net.JoinHostPort(w.relayIP[nw.Name], "9090")})
	agent := w.startSandbox(ctx, t, sandboxSpec{name: "agent", net: nw, volume: newVolume(ctx, t, "agent"), socks: true})
	assert.NotEqual(t, agent.addr, web.addr)
	assert.True(t, strings.HasPrefix(agent.addr, "100."), "overlay address %s in 100.64.0.0/10", agent.addr)

	reach(ctx, t, agent, web, 30*time.Second)
	st := waitPath(ctx, t, agent, "web", "direct", 30*time.Second)
	waitPath(ctx, t, web, "agent", "direct", 30*time.Second)
	t.Logf("agent's view:\n%s", st)
	reach(ctx, t, agent, web, 10*time.Second) // now over the direct path
	assertForwarded(ctx, t, web, agent, net.JoinHostPort(w.relayIP[nw.Name], "9090"))
}

// TestSandboxesRelayed: the same pair on two Docker networks that only
// control and the relay join. No packet can go directly (Docker isolates
// bridge networks from each other), so the request crosses the overlay
// through the relay, and both sandboxes say so.
func TestSandboxesRelayed(t *testing.T) {
	ctx, img := setup(t)
	netA, netB := newNetwork(ctx, t), newNetwork(ctx, t)
	w := newWorld(ctx, t, img, netA, netB)
	web := w.startSandbox(ctx, t, sandboxSpec{name: "web", net: netB, volume: newVolume(ctx, t, "web"),
		forwardTo: net.JoinHostPort(w.relayIP[netB.Name], "9090")})
	agent := w.startSandbox(ctx, t, sandboxSpec{name: "agent", net: netA, volume: newVolume(ctx, t, "agent"), socks: true})
	assert.Equal(t, []string{netA.Name}, networks(ctx, t, agent.box))
	assert.Equal(t, []string{netB.Name}, networks(ctx, t, web.box))

	reach(ctx, t, agent, web, 30*time.Second)
	st := agent.status(ctx, t)
	t.Logf("agent's view:\n%s", st)
	assert.Equal(t, "relay", pathTo(st, "web"), "agent's path to web")
	assert.Equal(t, "relay", pathTo(web.status(ctx, t), "agent"), "web's path to agent")

	// Not merely "no direct path yet": wait for an ICE attempt that checked
	// its pairs and found every one failed (about 10 s); the path is still
	// relay, and traffic still flows.
	poll(ctx, t, "an ICE attempt from agent to web with every pair failed", 45*time.Second, func(ctx context.Context) error {
		st, err := agent.statusErr(ctx)
		if err != nil {
			return err
		}
		if !allPairsFailed(st) {
			return fmt.Errorf("status:\n%s", st)
		}
		assert.Equal(t, "relay", pathTo(st, "web"), "agent's path to web after ICE failed:\n%s", st)
		t.Logf("agent's view once ICE failed:\n%s", st)
		return nil
	})
	reach(ctx, t, agent, web, 10*time.Second)
	assertForwarded(ctx, t, web, agent, net.JoinHostPort(w.relayIP[netB.Name], "9090"))
}

// TestSandboxRestartKeepsIdentity: a sandbox container removed and started
// again on its state volume comes back with the same node ID and overlay
// address, and its peer reaches it there again.
func TestSandboxRestartKeepsIdentity(t *testing.T) {
	ctx, img := setup(t)
	nw := newNetwork(ctx, t)
	w := newWorld(ctx, t, img, nw)
	spec := sandboxSpec{name: "web", net: nw, volume: newVolume(ctx, t, "web"),
		forwardTo: net.JoinHostPort(w.relayIP[nw.Name], "9090")}
	web := w.startSandbox(ctx, t, spec)
	agent := w.startSandbox(ctx, t, sandboxSpec{name: "agent", net: nw, volume: newVolume(ctx, t, "agent"), socks: true})
	reach(ctx, t, agent, web, 30*time.Second)

	web.terminate(t)
	again := w.startSandbox(ctx, t, spec)
	assert.NotEqual(t, web.GetContainerID(), again.GetContainerID(), "a new container")
	assert.Equal(t, web.nodeID, again.nodeID, "node ID after restart")
	assert.Equal(t, web.addr, again.addr, "overlay address after restart")
	// A peer that kept the old instance's WireGuard session may need a new
	// handshake first, hence the longer wait.
	reach(ctx, t, agent, again, 60*time.Second)
}

// allPairsFailed tells whether a status shows ICE candidate pairs, all
// failed.
func allPairsFailed(status string) bool {
	n := 0
	for _, line := range strings.Split(status, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "pair ") {
			continue
		}
		if !strings.HasSuffix(line, ": failed") {
			return false
		}
		n++
	}
	return n > 0
}

// networks returns the names of the Docker networks b is on.
func networks(ctx context.Context, t *testing.T, b *box) []string {
	t.Helper()
	in, err := b.Inspect(ctx)
	require.NoError(t, err)
	var names []string
	for name := range in.NetworkSettings.Networks {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
