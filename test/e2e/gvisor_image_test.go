package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/latticelab/lattice/runsc"
)

// Where gvisor mode's tools are in the gvisor image. runsc is in $PATH, so
// lattice finds it without --runsc; ip and iptables keep this host's
// paths, which are on the default $PATH too.
const gvisorRunsc = "/usr/local/bin/runsc"

// gvisorTools is what phase 1 runs (node/kernel_linux.go, sandbox/iptables.go,
// sandbox/iptables_defaults.go: the default denies in both families).
var gvisorTools = []string{"ip", "iptables", "iptables-restore", "ip6tables", "ip6tables-restore"}

// xtablesDirs are where iptables looks for its match and target modules
// (XTABLES_LIBDIR, fixed at its build): Debian's multiarch directory
// first, then other distributions'.
var xtablesDirs = []string{"/usr/lib/x86_64-linux-gnu/xtables", "/usr/lib/aarch64-linux-gnu/xtables",
	"/usr/lib64/xtables", "/usr/lib/xtables"}

// gvisorImage builds the image a gvisor-mode sandbox runs in, on top of
// the suite's lattice image (FROM scratch, so still nothing but what the
// test puts in): a static runsc, the static test agent, and this host's
// ip and iptables with every shared library they load, the dynamic loader
// and iptables' modules, at the paths they have here. It runs as root
// (phase 1 needs it) and its default command is the agent sleeping, so the
// test can run lattice, then inspect the container, with docker exec. The
// image is removed when the test ends.
//
// It skips, saying why, when this host lacks runsc (make runsc), ip,
// iptables or ldd.
func gvisorImage(ctx context.Context, t *testing.T, base string) string {
	t.Helper()
	runscBin, err := runsc.Find("")
	if err != nil {
		t.Skipf("gvisor mode in a container needs a static runsc on this host: %v", err)
	}
	if _, err := exec.LookPath("ldd"); err != nil {
		t.Skipf("copying ip and iptables into the image needs ldd: %v", err)
	}
	tools := map[string]string{} // path in $PATH -> the file it resolves to
	for _, name := range gvisorTools {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("gvisor mode's phase 1 runs %s, which this host lacks: %v", name, err)
		}
		real, err := filepath.EvalSymlinks(p)
		require.NoError(t, err)
		tools[p] = real
	}

	start := time.Now()
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	buildAgentInto(ctx, t, filepath.Join(rootfs, "agent"))
	require.NoError(t, linkOrCopy(runscBin, filepath.Join(rootfs, gvisorRunsc)))
	var elfs []string
	for p, real := range tools {
		// A copy of the file, not the symlink: xtables-nft-multi picks
		// what to be from its name, and "iptables" is what it is run as.
		require.NoError(t, linkOrCopy(real, filepath.Join(rootfs, p)))
		elfs = append(elfs, real)
	}
	for _, d := range xtablesDirs {
		mods, _ := filepath.Glob(filepath.Join(d, "*.so"))
		if len(mods) == 0 {
			continue
		}
		for _, m := range mods {
			require.NoError(t, linkOrCopy(m, filepath.Join(rootfs, m)))
		}
		elfs = append(elfs, mods...)
		break
	}
	libs, err := sharedLibs(ctx, elfs)
	require.NoError(t, err)
	for _, l := range libs {
		require.NoError(t, linkOrCopy(l, filepath.Join(rootfs, l)))
	}
	for _, f := range []string{"/etc/protocols", "/etc/ethertypes"} {
		if _, err := os.Stat(f); err == nil {
			require.NoError(t, linkOrCopy(f, filepath.Join(rootfs, f)))
		}
	}
	dockerfile := strings.Join([]string{
		"FROM " + base,
		"COPY rootfs/ /",
		"USER 0:0",
		"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		// The agent as PID 1 has no SIGTERM handler; don't wait for it.
		"STOPSIGNAL SIGKILL",
		`ENTRYPOINT ["/agent"]`,
		`CMD ["sleep", "10m"]`,
		"",
	}, "\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644))

	provider, err := testcontainers.NewDockerProvider(testcontainers.WithLogger(tclog.NewNoopLogger()))
	require.NoError(t, err)
	defer provider.Close()
	var buildLog bytes.Buffer
	tag, err := provider.BuildImage(ctx, &testcontainers.ContainerRequest{FromDockerfile: testcontainers.FromDockerfile{
		Context:        dir,
		Repo:           "lattice-gvisor",
		Tag:            "e2e-" + randomHex(4),
		BuildLogWriter: &buildLog,
		KeepImage:      true,
		BuildOptionsModifier: func(o *client.ImageBuildOptions) {
			o.Labels = ownerLabels()
		},
	}})
	if tag != "" {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			_, err := dockerClient(t).ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true})
			assert.NoError(t, err, "remove image %s", tag)
		})
	}
	require.NoError(t, err, "docker build of the gvisor image:\n%s", &buildLog)
	t.Logf("built %s (runsc, agent, %d tools, %d libraries) in %v", tag, len(tools), len(libs), time.Since(start).Round(time.Millisecond))
	return tag
}

// buildAgentInto compiles cmd/lattice/testdata/agent statically to dst.
func buildAgentInto(ctx context.Context, t *testing.T, dst string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go tool builds the agent")
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	build := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-o", dst, "./cmd/lattice/testdata/agent")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build the agent (CGO_ENABLED=0):\n%s", out)
}

// sharedLibs returns every shared library the ELF files load, as ldd
// lists them (with the dynamic loader), by absolute path, each once.
func sharedLibs(ctx context.Context, files []string) ([]string, error) {
	seen := map[string]bool{}
	var libs []string
	for _, f := range files {
		out, err := exec.CommandContext(ctx, "ldd", f).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", f, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
			// "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
			for _, field := range strings.Fields(sc.Text()) {
				if strings.HasPrefix(field, "/") && !seen[field] {
					seen[field] = true
					libs = append(libs, field)
				}
			}
		}
	}
	return libs, nil
}

// linkOrCopy puts src's content (following symlinks) at dst, keeping its
// mode: a hard link when both are on one filesystem, else a copy.
func linkOrCopy(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		return err
	}
	if os.Link(real, dst) == nil {
		return nil
	}
	in, err := os.Open(real)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
