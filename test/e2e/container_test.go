package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
)

const (
	// nobody is the image's user (USER 65534:65534 in the Dockerfile).
	nobody = 65534
	// dataDir is where every container's volume is mounted; the image
	// makes it, owned by nobody.
	dataDir = "/var/lib/lattice"
)

// box is one lattice container of a test.
type box struct {
	*testcontainers.DockerContainer
	name string
	// terminated is set once the container is removed.
	terminated bool
	// logs is what the container printed, kept when the test removes the
	// container itself (restart), so a later failure can still show it.
	logs string
}

// boxSpec says how to run one container. Every container runs hardened
// (see harden), with a named volume at dataDir.
type boxSpec struct {
	name   string
	nets   []*testcontainers.DockerNetwork // the first is the container's network mode
	alias  string                          // DNS name on every network
	volume string                          // named volume mounted at dataDir
	// files are written into the volume before the container starts, mode
	// 0600 and owned by nobody, as a secret must be for lattice to read it.
	files map[string]string
	args  []string
	ports []string // container ports to publish on the host, e.g. "1080/tcp"
	// ready is a regexp the container prints once it serves.
	ready string
}

// portBindings publishes ports on a random host port, on loopback only when
// the engine runs on this machine (no need to offer a sandbox's proxy to
// the network), on all the engine's addresses when it is remote.
func portBindings(t *testing.T, ports []string) network.PortMap {
	t.Helper()
	ip := netip.IPv4Unspecified()
	if host, _ := publishedHost(t); host == "127.0.0.1" {
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	m := network.PortMap{}
	for _, p := range ports {
		m[network.MustParsePort(p)] = []network.PortBinding{{HostIP: ip, HostPort: "0"}}
	}
	return m
}

// publishedHost is where the host reaches published ports: loopback when
// the engine listens on a unix socket (it runs here), else the engine's
// host name, or TESTCONTAINERS_HOST_OVERRIDE. Not testcontainers' own
// guess: on a machine that has /.dockerenv it takes the default gateway.
func publishedHost(t *testing.T) (string, error) {
	t.Helper()
	if h := os.Getenv("TESTCONTAINERS_HOST_OVERRIDE"); h != "" {
		return h, nil
	}
	u, err := url.Parse(dockerClient(t).DaemonHost())
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "unix", "npipe":
		return "127.0.0.1", nil
	case "tcp", "http", "https":
		return u.Hostname(), nil
	}
	return "", fmt.Errorf("docker host %s: cannot tell where published ports are", u)
}

// harden is the zero-privilege configuration every container gets: no
// capability at all, a read-only root filesystem, no device, no way to gain
// privileges (setuid binaries, file capabilities), not privileged. The user
// is the image's (nobody); the test checks it did not change.
func harden(hc *container.HostConfig) {
	hc.CapDrop = []string{"ALL"}
	hc.CapAdd = nil
	hc.ReadonlyRootfs = true
	hc.Privileged = false
	hc.SecurityOpt = []string{"no-new-privileges"}
	hc.Devices = nil
}

// startBox runs a container from spec and waits for its ready line. An
// error says why and carries the container's logs: a container that exits
// early fails at once with its exit code (the wait strategy checks its
// state on every poll), one that hangs fails after startTimeout. The
// container is removed when the test ends, whatever happens.
func startBox(ctx context.Context, t *testing.T, img string, s boxSpec) (*box, error) {
	t.Helper()
	cli := dockerClient(t)
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithLogger(tclog.TestLogger(t)),
		testcontainers.WithLabels(ownerLabels()),
		testcontainers.WithCmd(s.args...),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			harden(hc)
			// Only the networks asked for: not also Docker's default bridge,
			// which every container would share.
			hc.NetworkMode = container.NetworkMode(s.nets[0].Name)
			hc.PortBindings = portBindings(t, s.ports)
		}),
		testcontainers.WithMounts(testcontainers.VolumeMount(s.volume, dataDir)),
		testcontainers.WithAdditionalLifecycleHooks(testcontainers.ContainerLifecycleHooks{
			PostCreates: []testcontainers.ContainerHook{writeSecrets(cli, s.files)},
		}),
		// Logs only: scratch has no shell for the port-listening strategies.
		testcontainers.WithWaitStrategy(wait.ForLog(s.ready).AsRegexp().WithStartupTimeout(startTimeout)),
	}
	for _, n := range s.nets {
		opts = append(opts, tcnetwork.WithNetwork([]string{s.alias}, n))
	}
	if len(s.ports) > 0 {
		opts = append(opts, testcontainers.WithExposedPorts(s.ports...))
	}
	c, err := testcontainers.Run(ctx, img, opts...)
	b := &box{DockerContainer: c, name: s.name}
	if c != nil {
		t.Cleanup(func() { b.terminate(t) })
		// Registered after terminate, so it runs first (cleanups are LIFO).
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("logs of %s:\n%s", b.name, b.output())
			}
		})
	}
	if err != nil {
		state := ""
		if c != nil {
			if st, serr := c.State(context.WithoutCancel(ctx)); serr == nil {
				state = fmt.Sprintf(" (%s, exit code %d)", st.Status, st.ExitCode)
			}
		}
		return b, fmt.Errorf("container %s%s: %w\nits logs:\n%s", s.name, state, err, b.output())
	}
	return b, nil
}

// mustStart is startBox for containers the test needs.
func mustStart(ctx context.Context, t *testing.T, img string, s boxSpec) *box {
	t.Helper()
	b, err := startBox(ctx, t, img, s)
	require.NoError(t, err)
	return b
}

// output returns everything the container printed (stdout and stderr), or
// what was kept before it was removed.
func (b *box) output() string {
	if b.DockerContainer == nil {
		return "(never created)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if b.terminated {
		return b.logs
	}
	rc, err := b.Logs(ctx)
	if err != nil {
		return fmt.Sprintf("(no logs: %v)", err)
	}
	defer rc.Close()
	out, _ := io.ReadAll(rc)
	return string(out)
}

// terminate stops and removes the container, keeping its logs. It is
// idempotent: the cleanup calls it again after a test did.
func (b *box) terminate(t *testing.T) {
	t.Helper()
	if b.DockerContainer == nil || b.terminated {
		return
	}
	b.logs, b.terminated = b.output(), true
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	err := testcontainers.TerminateContainer(b.DockerContainer, testcontainers.StopContext(ctx), testcontainers.StopTimeout(5*time.Second))
	assert.NoError(t, err, "remove container %s", b.name)
}

// match waits until the container's output matches re and returns the
// submatches.
func (b *box) match(ctx context.Context, t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	poll(ctx, t, fmt.Sprintf("%s prints %q", b.name, re), startTimeout, func(context.Context) error {
		if m = rx.FindStringSubmatch(b.output()); m == nil {
			return errors.New("not yet")
		}
		return nil
	})
	return m
}

// exec runs the image's binary inside the running container (as its user)
// and returns the exit code and the combined output.
func (b *box) exec(ctx context.Context, args ...string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	code, r, err := b.Exec(ctx, append([]string{"/lattice"}, args...), tcexec.Multiplexed())
	if err != nil {
		return 0, "", fmt.Errorf("exec in %s: %w", b.name, err)
	}
	out, err := io.ReadAll(r)
	return code, string(out), err
}

// ip returns the container's address on network nw.
func (b *box) ip(ctx context.Context, t *testing.T, nw *testcontainers.DockerNetwork) string {
	t.Helper()
	in, err := b.Inspect(ctx)
	require.NoError(t, err)
	ep, ok := in.NetworkSettings.Networks[nw.Name]
	require.True(t, ok, "%s is not on network %s", b.name, nw.Name)
	return ep.IPAddress.String()
}

// writeSecrets is a post-create hook that writes files into the volume
// with the owner and mode lattice requires of secrets. testcontainers'
// own file copy cannot: its tar headers carry no owner, so files arrive
// owned by root, and a 0600 root file is unreadable to nobody. The root
// filesystem is read-only, so the files go into the volume; Docker mounts
// a created container's volumes to extract into them.
func writeSecrets(cli *testcontainers.DockerClient, files map[string]string) testcontainers.ContainerHook {
	return func(ctx context.Context, c testcontainers.Container) error {
		if len(files) == 0 {
			return nil
		}
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		names := make([]string, 0, len(files))
		for name := range files {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: int64(len(files[name])),
				Uid: nobody, Gid: nobody, ModTime: time.Now()}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if _, err := tw.Write([]byte(files[name])); err != nil {
				return err
			}
		}
		if err := tw.Close(); err != nil {
			return err
		}
		_, err := cli.CopyToContainer(ctx, c.GetContainerID(), client.CopyToContainerOptions{DestinationPath: dataDir, Content: &buf})
		if err != nil {
			return fmt.Errorf("write secrets into %s: %w", dataDir, err)
		}
		return nil
	}
}

// newNetwork makes a Docker bridge network, removed when the test ends
// (after the containers on it, which are started later).
func newNetwork(ctx context.Context, t *testing.T) *testcontainers.DockerNetwork {
	t.Helper()
	dockerClient(t)
	nw, err := tcnetwork.New(ctx, tcnetwork.WithLabels(ownerLabels()))
	if nw != nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			assert.NoError(t, nw.Remove(ctx), "remove network %s", nw.Name)
		})
	}
	require.NoError(t, err)
	return nw
}

// newVolume makes a named volume, removed when the test ends (after the
// containers that use it).
func newVolume(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	cli := dockerClient(t)
	name = "lattice-e2e-" + name + "-" + randomHex(4)
	labels := testcontainers.GenericLabels()
	maps.Copy(labels, ownerLabels())
	_, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Labels: labels})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_, err := cli.VolumeRemove(ctx, name, client.VolumeRemoveOptions{Force: true})
		assert.NoError(t, err, "remove volume %s", name)
	})
	return name
}

// assertUnprivileged checks the container's actual settings, as the engine
// reports them, and, when the engine runs on this host, the kernel's view
// of its process: no capability in any set, no_new_privs, user nobody, no
// /dev/net/tun.
func assertUnprivileged(ctx context.Context, t *testing.T, b *box) {
	t.Helper()
	in, err := b.Inspect(ctx)
	require.NoError(t, err)
	hc := in.HostConfig
	assert.Contains(t, hc.CapDrop, "ALL", "%s: every capability dropped", b.name)
	assert.Empty(t, hc.CapAdd, "%s: none added back", b.name)
	assert.True(t, hc.ReadonlyRootfs, "%s: read-only root filesystem", b.name)
	assert.False(t, hc.Privileged, "%s: not privileged", b.name)
	assert.Empty(t, hc.Devices, "%s: no devices", b.name)
	assert.Empty(t, hc.DeviceRequests, "%s: no device requests", b.name)
	assert.Contains(t, hc.SecurityOpt, "no-new-privileges", "%s", b.name)
	assert.Equal(t, fmt.Sprintf("%d:%d", nobody, nobody), in.Config.User, "%s: the image's user", b.name)
	require.True(t, in.State.Running, "%s is running", b.name)

	// The engine's word, checked against the kernel's, when its processes
	// are visible here (not so with a remote engine).
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", in.State.Pid))
	if err != nil {
		t.Logf("%s: process %d not visible here (%v); the engine's settings above must do", b.name, in.State.Pid, err)
		return
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		assert.Equal(t, "0000000000000000", fields[set], "%s: %s", b.name, set)
	}
	assert.Equal(t, "1", fields["NoNewPrivs"], "%s: no_new_privs", b.name)
	id := strconv.Itoa(nobody)
	assert.Equal(t, []string{id, id, id, id}, strings.Fields(fields["Uid"]), "%s: uid", b.name)
	assert.Equal(t, []string{id, id, id, id}, strings.Fields(fields["Gid"]), "%s: gid", b.name)
	_, err = os.Stat(fmt.Sprintf("/proc/%d/root/dev/net/tun", in.State.Pid))
	assert.True(t, errors.Is(err, os.ErrNotExist), "%s: no /dev/net/tun (stat: %v)", b.name, err)
}

// poll calls fn until it returns nil, every 250 ms, and fails the test with
// fn's last error when timeout (or ctx) runs out first.
func poll(ctx context.Context, t *testing.T, what string, timeout time.Duration, fn func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		err := fn(ctx)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			require.FailNow(t, "timed out waiting: "+what, "after %v; last: %v", timeout, err)
		case <-tick.C:
		}
	}
}
