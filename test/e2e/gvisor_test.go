package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
)

const (
	// gvisorData is where the gvisor container's volume is mounted: not
	// dataDir, which the image gives to nobody, and root without
	// CAP_DAC_OVERRIDE cannot write there. A volume, not a tmpfs, so that
	// runsc's logs can be copied out when the test fails.
	gvisorData = "/gvisor"
	// gvisorState is the gvisor sandbox's --state-dir.
	gvisorState = gvisorData + "/state"
	// gvisorRunTimeout bounds `lattice sandbox run`: registration, wg0,
	// rules, runsc start, the agent's checks, teardown.
	gvisorRunTimeout = 90 * time.Second
	// hostCgroups is the engine's cgroup tree, which the gvisor container
	// does not get: runsc runs with --ignore-cgroups, so the sandbox stays
	// in the container's cgroup and makes none (checked after the run).
	hostCgroups = "/sys/fs/cgroup"
)

// gvisorCaps are the only capabilities the gvisor container keeps (every
// other is dropped), each with its bit in the kernel's capability sets:
// NET_ADMIN for phase 1 (wg0, its address and route, iptables); SYS_ADMIN
// for runsc (namespaces, its chroot, the sandbox's mounts); SYS_CHROOT for
// the gofer's chroot. With the systrap platform runsc needs no SYS_PTRACE,
// and with --ignore-cgroups no cgroup tree and no DAC_OVERRIDE to write
// into it.
//
// Not --privileged: it asks for every capability, and an engine whose own
// bounding set lacks one (this engine runs without CAP_SYS_RESOURCE) fails
// every privileged container with "unable to apply caps: operation not
// permitted". Three capabilities also say more about what gvisor mode needs.
var gvisorCaps = map[string]uint{"CAP_NET_ADMIN": 12, "CAP_SYS_CHROOT": 18, "CAP_SYS_ADMIN": 21}

// gvisorCapNames returns gvisorCaps' names, as the engine reports them.
func gvisorCapNames() []string { return slices.Sorted(maps.Keys(gvisorCaps)) }

// gvisorCapSet returns gvisorCaps as /proc/PID/status shows a set.
func gvisorCapSet() string {
	var set uint64
	for _, bit := range gvisorCaps {
		set |= 1 << bit
	}
	return fmt.Sprintf("%016x", set)
}

// TestSandboxGVisorContainer: `lattice sandbox run --mode gvisor` in a
// container with what gvisor mode needs and no more (root, three
// capabilities, /dev/net/tun, no seccomp filter; not privileged, no cgroup
// tree of the engine's) on the Docker network of control, the relay
// and a pod-mode sandbox. Phase 1 makes wg0
// and the egress rules in the container's network namespace; phase 2 runs
// the static agent in runsc, and the agent fetches the pod sandbox's
// forward over the overlay, sees gVisor's kernel, cannot create a TUN, add
// a route or read the WireGuard key, and exits with 7, which becomes
// lattice's exit code. Afterwards the container has no wg0, no lattice
// rule and no runsc container, and the engine's cgroup tree holds none of
// the sandbox (runsc made none).
func TestSandboxGVisorContainer(t *testing.T) {
	ctx, img := setup(t)
	gimg := gvisorImage(ctx, t, img)
	nw := newNetwork(ctx, t)
	w := newWorld(ctx, t, img, nw)
	target := net.JoinHostPort(w.relayIP[nw.Name], "9090")
	web := w.startSandbox(ctx, t, sandboxSpec{name: "web", net: nw, volume: newVolume(ctx, t, "web"), forwardTo: target})

	// A name of its own: a runsc that made cgroups would name them after
	// it, in the engine's cgroup tree, which other runs share. The cleanup
	// is registered first, so it runs after the container is gone.
	name := "gvisor-" + randomHex(4)
	t.Cleanup(func() { removeSandboxCgroups(t, "lattice-"+name) })
	g := startGVisorBox(ctx, t, gimg, nw, name)
	assertGVisorSettings(ctx, t, g)

	url := fmt.Sprintf("http://%s/metrics", net.JoinHostPort(web.addr, fmt.Sprint(webPort)))
	start := time.Now()
	code, stdout, stderr, err := g.execSplit(ctx, gvisorRunTimeout,
		"/lattice", "sandbox", "run", "--mode", "gvisor", "--name", name, "--server-url", w.controlURL,
		"--token", w.token, "--state-dir", gvisorState, "--",
		"/agent", "fetch", url, "gvisor", "notun", "noroute", "noread", gvisorState+"/credentials.json", "exit", "7")
	took := time.Since(start)
	if err != nil || code != 7 {
		t.Logf("lattice's stderr:\n%s", stderr)
		g.dumpRunscLogs(ctx, t, name)
	}
	require.NoError(t, err)
	t.Logf("sandbox run --mode gvisor took %v; the agent said:\n%s", took.Round(time.Millisecond), stdout)
	require.Equal(t, 7, code, "the agent's exit code is lattice's; stdout:\n%s", stdout)
	assert.Contains(t, stdout, "fetch "+url+": ")
	assert.Contains(t, stdout, "lattice_relay_clients", "the relay's metrics page, through web's forward")
	assert.Contains(t, stdout, "gvisor: kernel log says gVisor")
	assert.Contains(t, stdout, "notun: ")
	assert.Contains(t, stdout, "noroute: ")
	assert.Contains(t, stdout, "noread: ")
	assert.NotContains(t, stdout, "FAIL")
	m := regexp.MustCompile(`sandbox: ` + name + ` \((\S+)\) at (\S+)/\d+, mode gvisor`).FindStringSubmatch(stderr)
	require.NotNil(t, m, "lattice names the sandbox's address; stderr:\n%s", stderr)
	assert.Contains(t, stderr, `msg="kernel interface up" name=wg0`)
	assert.NotContains(t, stderr, "iptables: traffic on the overlay may be filtered", "phase 1's INPUT rule went in")

	// The request came from the gvisor sandbox's overlay address: web's
	// audit log has the forward.
	assertForwarded(ctx, t, web, &sandbox{box: g.box, addr: m[2]}, target)

	// Nothing left behind.
	code, out, err := g.exec(ctx, "ip", "link", "show", "wg0")
	require.NoError(t, err)
	assert.NotEqual(t, 0, code, "wg0 is gone: %s", out)
	assert.Contains(t, out, `"wg0" does not exist`)
	code, out, err = g.exec(ctx, "iptables", "-S")
	require.NoError(t, err)
	require.Equal(t, 0, code, "iptables -S: %s", out)
	assert.NotContains(t, out, "LATTICE")
	assert.NotContains(t, out, "lattice")
	code, out, err = g.exec(ctx, gvisorRunsc, "--root", gvisorState+"/runsc/state", "list", "--quiet")
	require.NoError(t, err)
	require.Equal(t, 0, code, "runsc list: %s", out)
	assert.Empty(t, strings.TrimSpace(out), "no runsc container left")
	assert.Empty(t, sandboxCgroups("lattice-"+name), "runsc made a cgroup for the sandbox")
}

// gvisorBox is the container gvisor mode runs in.
type gvisorBox struct {
	*box
}

// startGVisorBox runs the gvisor image (the agent sleeping, as PID 1) with
// what gvisor mode needs, on nw as name. Unlike startBox it is not
// hardened: phase 1 needs root and NET_ADMIN, runsc the rest of gvisorCaps
// and system calls Docker's seccomp profile refuses. The container is removed when
// the test ends, with its logs attached if the test failed.
func startGVisorBox(ctx context.Context, t *testing.T, img string, nw *testcontainers.DockerNetwork, name string) *gvisorBox {
	t.Helper()
	return runGVisorImage(ctx, t, img, nw, name, func(hc *container.HostConfig) {
		hc.CapAdd = gvisorCapNames()
		// runsc makes the system calls that build a sandbox (unshare,
		// mount, pivot_root, seccomp of its own): Docker's default
		// profile refuses some, and runsc fails to start.
		hc.SecurityOpt = []string{"seccomp=unconfined"}
		// runsc mounts a tmpfs on /tmp for its chroot, so /tmp must
		// exist; scratch has none.
		hc.Tmpfs = map[string]string{"/tmp": "", "/run": ""}
	}, testcontainers.WithMounts(testcontainers.VolumeMount(newVolume(ctx, t, name), gvisorData)))
}

// runGVisorImage runs the gvisor image (the agent sleeping, as PID 1) on
// nw as name, not privileged, every capability dropped, with /dev/net/tun;
// settings adds to that. The container is removed when the test ends,
// with its logs attached if the test failed.
func runGVisorImage(ctx context.Context, t *testing.T, img string, nw *testcontainers.DockerNetwork, name string,
	settings func(*container.HostConfig), more ...testcontainers.ContainerCustomizer) *gvisorBox {
	t.Helper()
	opts := append([]testcontainers.ContainerCustomizer{
		testcontainers.WithLogger(tclog.TestLogger(t)),
		testcontainers.WithLabels(ownerLabels()),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.NetworkMode = container.NetworkMode(nw.Name)
			hc.CapDrop = []string{"ALL"}
			hc.Privileged = false
			hc.Devices = []container.DeviceMapping{{PathOnHost: "/dev/net/tun", PathInContainer: "/dev/net/tun", CgroupPermissions: "rwm"}}
			settings(hc)
		}),
		tcnetwork.WithNetwork([]string{name}, nw),
	}, more...)
	c, err := testcontainers.Run(ctx, img, opts...)
	b := &box{DockerContainer: c, name: name}
	if c != nil {
		t.Cleanup(func() { b.terminate(t) })
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("logs of %s:\n%s", b.name, b.output())
			}
		})
	}
	require.NoError(t, err, "container %s; its logs:\n%s", name, b.output())
	return &gvisorBox{box: b}
}

// assertGVisorSettings checks the container's actual settings: root, not
// privileged, exactly the capabilities asked for (in the engine's words
// and the kernel's), the TUN device.
func assertGVisorSettings(ctx context.Context, t *testing.T, g *gvisorBox) {
	t.Helper()
	in, err := g.Inspect(ctx)
	require.NoError(t, err)
	hc := in.HostConfig
	assert.False(t, hc.Privileged, "not privileged")
	assert.ElementsMatch(t, gvisorCapNames(), hc.CapAdd)
	assert.Equal(t, []string{"ALL"}, hc.CapDrop)
	assert.Equal(t, "0:0", in.Config.User)
	require.Len(t, hc.Devices, 1)
	assert.Equal(t, "/dev/net/tun", hc.Devices[0].PathInContainer)
	require.True(t, in.State.Running, "%s is running", g.name)

	// The kernel's view of PID 1, when the engine runs here.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", in.State.Pid))
	if err != nil {
		t.Logf("%s: process %d not visible here (%v); the engine's settings above must do", g.name, in.State.Pid, err)
		return
	}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "CapEff" || k == "CapBnd") {
			assert.Equal(t, gvisorCapSet(), strings.TrimSpace(v), "%s: %s", g.name, k)
		}
	}
}

// exec runs argv in the container as root, bounded in time, and returns
// the exit code and the combined output.
func (g *gvisorBox) exec(ctx context.Context, argv ...string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	code, r, err := g.Exec(ctx, argv, tcexec.Multiplexed())
	if err != nil {
		return 0, "", fmt.Errorf("exec %v in %s: %w", argv, g.name, err)
	}
	out, err := io.ReadAll(r)
	return code, string(out), err
}

// execSplit is exec with stdout and stderr apart and a timeout of its own.
func (g *gvisorBox) execSplit(ctx context.Context, timeout time.Duration, argv ...string) (code int, stdout, stderr string, err error) {
	return g.execSplitAs(ctx, "", timeout, argv...)
}

// execSplitAs is execSplit as user (UID:GID; the image's if empty).
func (g *gvisorBox) execSplitAs(ctx context.Context, user string, timeout time.Duration, argv ...string) (code int, stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var opts []tcexec.ProcessOption
	if user != "" {
		opts = append(opts, tcexec.WithUser(user))
	}
	code, r, err := g.Exec(ctx, argv, opts...)
	if err != nil {
		return 0, "", "", fmt.Errorf("exec %v in %s: %w", argv, g.name, err)
	}
	var o, e bytes.Buffer
	if _, err := stdcopy.StdCopy(&o, &e, r); err != nil {
		return code, o.String(), e.String(), fmt.Errorf("exec in %s: output: %w", g.name, err)
	}
	return code, o.String(), e.String(), nil
}

// dumpRunscLogs attaches runsc's logs of container lattice-NAME, which
// say why a sandbox did not start.
func (g *gvisorBox) dumpRunscLogs(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	for _, suffix := range []string{"", ".run", ".boot", ".gofer"} {
		p := fmt.Sprintf("%s/runsc/logs/lattice-%s%s.log", gvisorState, name, suffix)
		rc, err := g.CopyFileFromContainer(ctx, p)
		if err != nil {
			t.Logf("%s: %v", p, err)
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(rc, 64<<10))
		rc.Close()
		t.Logf("%s:\n%s", p, b)
	}
}

// sandboxCgroups returns the cgroups of a sandbox's container in the
// engine's cgroup tree, when it is this host's (nil otherwise). The
// container's ID is lattice-NAME-RANDOM (sandbox.RunscDriver.ContainerID):
// prefix is lattice-NAME, and the glob adds the rest.
func sandboxCgroups(prefix string) []string {
	v1, _ := filepath.Glob(filepath.Join(hostCgroups, "*", prefix+"-*"))
	v2, _ := filepath.Glob(filepath.Join(hostCgroups, prefix+"-*"))
	for _, p := range v2 {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			v1 = append(v1, p) // cgroup v2
		}
	}
	return v1
}

// removeSandboxCgroups removes what runsc left of the sandbox's cgroups (a
// runsc that fails to start leaves them), when the engine runs here.
func removeSandboxCgroups(t *testing.T, id string) {
	t.Helper()
	for _, p := range sandboxCgroups(id) {
		if err := os.Remove(p); err != nil {
			t.Logf("remove cgroup %s: %v", p, err)
		}
	}
}
