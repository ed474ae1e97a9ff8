package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/tls"

	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/latticelab/lattice/deploy"
)

// The Kubernetes manifests (deploy/), run under Docker: each pod becomes
// a container with the same image, arguments, environment, user,
// capabilities, root filesystem, seccomp profile, limits and volumes, all
// read from the manifest, so the two cannot drift apart. What Kubernetes
// gives and Docker lacks is made by the test: Secret and ConfigMap
// volumes are named volumes holding the files with the manifest's mode
// and owner; emptyDir and claim volumes are tmpfs owned by the pod's user
// and fsGroup; Service names are network aliases; probes are run by
// the test as the kubelet would.

// podEnv is what the cluster would hold besides the manifests.
type podEnv struct {
	secrets    map[string]map[string]string // Secret name -> key -> content
	configMaps map[string]map[string]string
	images     map[string]string // manifest image -> the image built here
}

// podSpec is one pod of a workload.
type podSpec struct {
	w         deploy.Workload
	container string
	name      string // the pod's name (metadata.name, POD_NAME)
	aliases   []string
	extraArgs []string // appended to the manifest's
}

// podArgs returns the container's environment and arguments, $(VAR)
// expanded from that environment as the kubelet does.
func (e *podEnv) podArgs(p podSpec, c *corev1.Container) (map[string]string, []string, error) {
	env := map[string]string{}
	for _, v := range c.Env {
		switch {
		case v.ValueFrom == nil:
			env[v.Name] = v.Value
		case v.ValueFrom.FieldRef != nil && v.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[v.Name] = p.name
		case v.ValueFrom.ConfigMapKeyRef != nil:
			r := v.ValueFrom.ConfigMapKeyRef
			val, ok := e.configMaps[r.Name][r.Key]
			if !ok {
				return nil, nil, fmt.Errorf("%s: env %s: no ConfigMap %s key %s", p.name, v.Name, r.Name, r.Key)
			}
			env[v.Name] = val
		default:
			return nil, nil, fmt.Errorf("%s: env %s: a source the test cannot provide", p.name, v.Name)
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	var args []string
	for _, a := range slices.Concat(c.Args, p.extraArgs) {
		args = append(args, ref.ReplaceAllStringFunc(a, func(m string) string {
			if v, ok := env[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		}))
	}
	return env, args, nil
}

// podHostConfig translates the pod's and container's securityContext and
// limits to Docker's settings.
func podHostConfig(w deploy.Workload, c *corev1.Container, hc *container.HostConfig) {
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	hc.Privileged = sc.Privileged != nil && *sc.Privileged
	hc.CapDrop, hc.CapAdd = nil, nil
	if caps := sc.Capabilities; caps != nil {
		for _, d := range caps.Drop {
			hc.CapDrop = append(hc.CapDrop, string(d))
		}
		for _, a := range caps.Add {
			hc.CapAdd = append(hc.CapAdd, "CAP_"+string(a))
		}
	}
	hc.ReadonlyRootfs = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
	hc.SecurityOpt = nil
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		hc.SecurityOpt = append(hc.SecurityOpt, "no-new-privileges")
	}
	sp := sc.SeccompProfile
	if sp == nil && w.Pod.Spec.SecurityContext != nil {
		sp = w.Pod.Spec.SecurityContext.SeccompProfile
	}
	if sp != nil && sp.Type == corev1.SeccompProfileTypeUnconfined {
		hc.SecurityOpt = append(hc.SecurityOpt, "seccomp=unconfined")
	} // RuntimeDefault is the engine's default profile
	hc.Devices = nil
	if cpu, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		hc.NanoCPUs = cpu.MilliValue() * 1_000_000
	}
	if mem, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		hc.Memory = mem.Value()
	}
}

// podUser is the container's uid and gid (and the pod's fsGroup, which
// owns its writable volumes).
func podUser(w deploy.Workload, c *corev1.Container) (uid, gid, fsGroup int64) {
	psc := w.Pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	uid = ptrOr(sc.RunAsUser, ptrOr(psc.RunAsUser, 0))
	gid = ptrOr(sc.RunAsGroup, ptrOr(psc.RunAsGroup, 0))
	return uid, gid, ptrOr(psc.FSGroup, gid)
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// volumeFile is one file a Secret or ConfigMap volume holds.
type volumeFile struct {
	name, content string
	mode          int64
	uid, gid      int
}

// podVolumes returns the container's mounts: named volumes (with the
// files to write into each, by mount path) and tmpfs mounts.
func (e *podEnv) podVolumes(ctx context.Context, t *testing.T, p podSpec, c *corev1.Container) (testcontainers.ContainerMounts, map[string]string, map[string][]volumeFile, error) {
	t.Helper()
	uid, _, fsGroup := podUser(p.w, c)
	var mounts testcontainers.ContainerMounts
	tmpfs := map[string]string{}
	files := map[string][]volumeFile{}
	for _, vm := range c.VolumeMounts {
		i := slices.IndexFunc(p.w.Pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		var v corev1.Volume
		if i >= 0 {
			v = p.w.Pod.Spec.Volumes[i]
		}
		switch {
		case v.Secret != nil || v.ConfigMap != nil:
			data, mode, owner := e.configMaps[ptrName(v.ConfigMap)], int64(0o644), int64(0)
			if v.Secret != nil {
				data, mode, owner = e.secrets[v.Secret.SecretName], int64(ptrOr(v.Secret.DefaultMode, 0o644)), ptrOr(v.Secret.DefaultUser, 0)
			}
			if data == nil {
				return nil, nil, nil, fmt.Errorf("%s: volume %s: the test has no data for it", p.name, vm.Name)
			}
			for k, val := range data {
				files[vm.MountPath] = append(files[vm.MountPath], volumeFile{k, val, mode, int(owner), int(fsGroup)})
			}
			mounts = append(mounts, testcontainers.VolumeMount(newVolume(ctx, t, p.name+"-"+vm.Name), testcontainers.ContainerMountTarget(vm.MountPath)))
		default: // emptyDir, or a claim from volumeClaimTemplates
			tmpfs[vm.MountPath] = fmt.Sprintf("uid=%d,gid=%d,mode=0770", uid, fsGroup)
		}
	}
	return mounts, tmpfs, files, nil
}

func ptrName(r *corev1.ConfigMapVolumeSource) string {
	if r == nil {
		return ""
	}
	return r.Name
}

// writeVolumeFiles is a post-create hook writing each volume's files.
func writeVolumeFiles(cli *testcontainers.DockerClient, files map[string][]volumeFile) testcontainers.ContainerHook {
	return func(ctx context.Context, c testcontainers.Container) error {
		for dir, fs := range files {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, f := range fs {
				hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.content)),
					Uid: f.uid, Gid: f.gid, ModTime: time.Now()}
				if err := tw.WriteHeader(hdr); err != nil {
					return err
				}
				if _, err := tw.Write([]byte(f.content)); err != nil {
					return err
				}
			}
			if err := tw.Close(); err != nil {
				return err
			}
			if _, err := cli.CopyToContainer(ctx, c.GetContainerID(), client.CopyToContainerOptions{DestinationPath: dir, Content: &buf}); err != nil {
				return fmt.Errorf("write the files of %s: %w", dir, err)
			}
		}
		return nil
	}
}

// runPod starts the pod's container on nw and waits until it is ready.
func (e *podEnv) runPod(ctx context.Context, t *testing.T, nw *testcontainers.DockerNetwork, p podSpec) *box {
	t.Helper()
	b := e.startPod(ctx, t, nw, p)
	e.waitReady(ctx, t, b, p.w, p.container)
	return b
}

// startPod starts the pod's container on nw, reachable by p.aliases.
func (e *podEnv) startPod(ctx context.Context, t *testing.T, nw *testcontainers.DockerNetwork, p podSpec) *box {
	t.Helper()
	c, err := p.w.Container(p.container)
	require.NoError(t, err)
	img, ok := e.images[c.Image]
	require.True(t, ok, "no image built for %s", c.Image)
	env, args, err := e.podArgs(p, c)
	require.NoError(t, err)
	mounts, tmpfs, files, err := e.podVolumes(ctx, t, p, c)
	require.NoError(t, err)
	uid, gid, _ := podUser(p.w, c)
	cli := dockerClient(t)
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithLogger(tclog.TestLogger(t)),
		testcontainers.WithLabels(ownerLabels()),
		testcontainers.WithEnv(env),
		testcontainers.WithCmd(args...),
		testcontainers.WithMounts(mounts...),
		testcontainers.WithTmpfs(tmpfs),
		testcontainers.WithConfigModifier(func(cfg *container.Config) { cfg.User = fmt.Sprintf("%d:%d", uid, gid) }),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			podHostConfig(p.w, c, hc)
			hc.NetworkMode = container.NetworkMode(nw.Name)
		}),
		testcontainers.WithAdditionalLifecycleHooks(testcontainers.ContainerLifecycleHooks{
			PostCreates: []testcontainers.ContainerHook{writeVolumeFiles(cli, files)},
		}),
		tcnetwork.WithNetwork(p.aliases, nw),
	}
	if len(c.Command) > 0 {
		opts = append(opts, testcontainers.WithEntrypoint(c.Command...))
	}
	ctr, err := testcontainers.Run(ctx, img, opts...)
	b := &box{DockerContainer: ctr, name: p.name}
	if ctr != nil {
		t.Cleanup(func() { b.terminate(t) })
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("logs of %s:\n%s", b.name, b.output())
			}
		})
	}
	require.NoError(t, err, "pod %s; its logs:\n%s", p.name, b.output())
	return b
}

// waitReady polls the container's startup probe, then its readiness
// probe, as the kubelet would, failing at once if the container exits.
func (e *podEnv) waitReady(ctx context.Context, t *testing.T, b *box, w deploy.Workload, ctr string) {
	t.Helper()
	c, err := w.Container(ctr)
	require.NoError(t, err)
	for _, pr := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe} {
		if pr == nil {
			continue
		}
		poll(ctx, t, fmt.Sprintf("%s passes its %s probe", b.name, probeKind(pr)), startTimeout, func(ctx context.Context) error {
			if st, err := b.State(ctx); err != nil || !st.Running {
				return fmt.Errorf("not running (%w): %s", err, b.output())
			}
			return b.probe(ctx, t, c, pr)
		})
	}
}

func probeKind(p *corev1.Probe) string {
	switch {
	case p.HTTPGet != nil:
		return "HTTP"
	case p.TCPSocket != nil:
		return "TCP"
	case p.Exec != nil:
		return "exec"
	}
	return "unknown"
}

// probe runs p against the container once, as the kubelet does: HTTP(S)
// to the pod's address (certificates unchecked), a TCP connection, or the
// command in the container.
func (b *box) probe(ctx context.Context, t *testing.T, c *corev1.Container, p *corev1.Probe) error {
	if p.Exec != nil {
		code, out, err := b.execArgv(ctx, p.Exec.Command...)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit code %d: %s", code, out)
		}
		return err
	}
	var port intstr.IntOrString
	if p.HTTPGet != nil {
		port = p.HTTPGet.Port
	} else if p.TCPSocket != nil {
		port = p.TCPSocket.Port
	}
	n := int(port.IntVal)
	if port.StrVal != "" {
		i := slices.IndexFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == port.StrVal })
		if i < 0 {
			return fmt.Errorf("probe port %s is not a port of %s", port.StrVal, c.Name)
		}
		n = int(c.Ports[i].ContainerPort)
	}
	in, err := b.Inspect(ctx)
	if err != nil {
		return err
	}
	var ip string
	for _, ep := range in.NetworkSettings.Networks {
		ip = ep.IPAddress.String()
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(n))
	if p.TCPSocket != nil {
		conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err
	}
	scheme := "http"
	if p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // #nosec G402 -- the kubelet does not verify probe certificates either
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+p.HTTPGet.Path, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s", p.HTTPGet.Path, resp.Status)
	}
	return nil
}

// execArgv runs argv in the container and returns the exit code and output.
func (b *box) execArgv(ctx context.Context, argv ...string) (int, string, error) {
	g := &gvisorBox{box: b}
	return g.exec(ctx, argv...)
}

// natsImage builds a nats-server image like the official one (FROM
// scratch, the binary at /nats-server as the entrypoint) from the
// nats-server module go.mod pins, the version the manifests name
// (deploy's TestNATSVersion checks they agree).
func natsImage(ctx context.Context, t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	if err := goBuild(ctx, root, filepath.Join(dir, "nats-server"), "github.com/nats-io/nats-server/v2"); err != nil {
		require.NoError(t, err)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Dockerfile"),
		[]byte("FROM scratch\nCOPY nats-server /nats-server\nENTRYPOINT [\"/nats-server\"]\n"), 0o644))
	provider, err := testcontainers.NewDockerProvider(testcontainers.WithLogger(tclog.NewNoopLogger()))
	require.NoError(t, err)
	defer provider.Close()
	var buildLog bytes.Buffer
	tag, err := provider.BuildImage(ctx, &testcontainers.ContainerRequest{FromDockerfile: testcontainers.FromDockerfile{
		Context: dir, Repo: "lattice-nats", Tag: "e2e-" + randomHex(4), BuildLogWriter: &buildLog, KeepImage: true,
		BuildOptionsModifier: func(o *client.ImageBuildOptions) { o.Labels = ownerLabels() },
	}})
	if tag != "" {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			_, err := dockerClient(t).ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true})
			if err != nil {
				t.Logf("remove image %s: %v", tag, err)
			}
		})
	}
	require.NoError(t, err, "docker build of the NATS image:\n%s", &buildLog)
	return tag
}

// goBuild compiles pkg statically to dst, in the module at root.
func goBuild(ctx context.Context, root, dst, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", dst, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return nil
}
