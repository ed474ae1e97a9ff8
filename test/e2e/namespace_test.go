package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
)

// nsState is the namespace sandbox's --state-dir: on a tmpfs nobody can
// write, since the container runs lattice as nobody.
const nsState = "/ns/state"

// TestSandboxNamespaceContainer: pod mode's namespace isolation (the
// default) in a container with every capability dropped, no new
// privileges, not privileged, lattice run as nobody: what docs/OPERATIONS.md
// says a pod needs for it, besides the two things the runtime's defaults
// refuse, which stand in here for their Kubernetes forms: seccomp off (a
// Localhost profile allowing clone with CLONE_NEW* and mount; Docker has
// no way to extend its default profile) and /proc unmasked (procMount:
// Unmasked). The agent, with no proxy variables, fetches the web sandbox's
// forward by its overlay address through its own TUN, cannot read the
// node's credentials.json, and exits with 7, which becomes lattice's exit
// code.
func TestSandboxNamespaceContainer(t *testing.T) {
	ctx, img := setup(t)
	gimg := gvisorImage(ctx, t, img) // the static test agent is in it
	nw := newNetwork(ctx, t)
	w := newWorld(ctx, t, img, nw)
	target := net.JoinHostPort(w.relayIP[nw.Name], "9090")
	web := w.startSandbox(ctx, t, sandboxSpec{name: "web", net: nw, volume: newVolume(ctx, t, "web"), forwardTo: target})

	name := "ns-" + randomHex(4)
	b := startNSBox(ctx, t, gimg, nw, name)
	in, err := b.Inspect(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"ALL"}, []string(in.HostConfig.CapDrop))
	assert.Empty(t, in.HostConfig.CapAdd, "no capability added")
	assert.False(t, in.HostConfig.Privileged)

	url := fmt.Sprintf("http://%s/metrics", net.JoinHostPort(web.addr, fmt.Sprint(webPort)))
	start := time.Now()
	code, stdout, stderr, err := b.execSplitAs(ctx, "65534:65534", gvisorRunTimeout,
		"/lattice", "sandbox", "run", "--mode", "pod", "--name", name, "--server-url", w.controlURL,
		"--token", w.token, "--state-dir", nsState, "--",
		"/agent", "fetch", url, "noread", nsState+"/credentials.json", "exit", "7")
	require.NoError(t, err)
	t.Logf("sandbox run --mode pod took %v; the agent said:\n%s", time.Since(start).Round(time.Millisecond), stdout)
	if code != 7 {
		t.Logf("lattice's stderr:\n%s", stderr)
	}
	require.Equal(t, 7, code, "the agent's exit code is lattice's; stdout:\n%s", stdout)
	assert.Contains(t, stderr, "isolation=namespace", "the agent ran in namespaces of its own")
	assert.Contains(t, stdout, "fetch "+url+": ")
	assert.Contains(t, stdout, "lattice_relay_clients", "the relay's metrics page, through web's forward")
	assert.Contains(t, stdout, "noread: ")
	assert.NotContains(t, stdout, "FAIL")
}

// startNSBox runs the gvisor image (the agent sleeping, as PID 1) with
// every capability dropped, no new privileges, seccomp off, /proc
// unmasked and /dev/net/tun, on nw as name.
func startNSBox(ctx context.Context, t *testing.T, img string, nw *testcontainers.DockerNetwork, name string) *gvisorBox {
	t.Helper()
	return runGVisorImage(ctx, t, img, nw, name, func(hc *container.HostConfig) {
		hc.SecurityOpt = []string{"no-new-privileges", "seccomp=unconfined"}
		// systempaths=unconfined: /proc unmasked, as procMount: Unmasked.
		hc.MaskedPaths, hc.ReadonlyPaths = []string{}, []string{}
		hc.Tmpfs = map[string]string{"/ns": "mode=1777", "/tmp": "mode=1777"}
	})
}
