package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

// Bounds. A cold build cache makes the static Pro binary the slowest step
// (about three and a half minutes on two cores); a warm one takes seconds.
const (
	buildTimeout = 8 * time.Minute
	// testTimeout bounds each test after the image exists.
	testTimeout = 3 * time.Minute
	// startTimeout is how long a container may take to print its ready line.
	startTimeout = 30 * time.Second
	// cleanupTimeout bounds removing one container, network, volume or image.
	cleanupTimeout = 30 * time.Second
)

// TestMain turns testcontainers' reaper (Ryuk) off: it is an image from a
// registry, and no registry is reachable here. Without it nothing removes
// leftovers for us, so every test removes its containers, networks and
// volumes in t.Cleanup, and TestMain removes the image it built.
//
// There is no goleak check in this package: the Docker client keeps idle
// HTTP connections (and their goroutines) alive in its transport, and
// testcontainers starts log readers of its own. The code under test runs
// in the containers, where the other packages' leak checks already apply.
func TestMain(m *testing.M) {
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	code := m.Run()
	removeImage()
	if docker.cli != nil {
		_ = docker.cli.Close()
	}
	os.Exit(code)
}

// docker is the engine connection, made once for the package.
var docker struct {
	once sync.Once
	cli  *testcontainers.DockerClient
	err  error
}

// dockerClient returns the engine connection, or skips the test when no
// engine is reachable. An engine that answers but fails otherwise (an API
// version it refuses, say) fails the test.
func dockerClient(t *testing.T) *testcontainers.DockerClient {
	t.Helper()
	docker.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		docker.cli, docker.err = testcontainers.NewDockerClientWithOpts(ctx)
		if docker.err != nil {
			docker.err = fmt.Errorf("%w: %w", errNoEngine, docker.err)
			return
		}
		if _, err := docker.cli.Ping(ctx, client.PingOptions{}); err != nil {
			if client.IsErrConnectionFailed(err) {
				err = fmt.Errorf("%w: %w", errNoEngine, err)
			}
			docker.err = err
			return
		}
		sweepOrphans(ctx, t, docker.cli.Client)
	})
	if errors.Is(docker.err, errNoEngine) {
		t.Skipf("%v (this suite runs the lattice image in real containers; start dockerd or set DOCKER_HOST)", docker.err)
	}
	if docker.err != nil {
		t.Fatalf("Docker engine: %v", docker.err)
	}
	return docker.cli
}

var errNoEngine = errors.New("no Docker engine reachable")

// image is the lattice image the suite built, made once for the package.
var image struct {
	once sync.Once
	tag  string
	err  error
}

// latticeImage returns the tag of the image built from the repository's
// Dockerfile, building it on first use.
func latticeImage(t *testing.T) string {
	t.Helper()
	dockerClient(t)
	image.once.Do(func() {
		start := time.Now()
		image.tag, image.err = buildImage()
		if image.err == nil {
			t.Logf("built %s in %v", image.tag, time.Since(start).Round(time.Second))
		}
	})
	if image.err != nil {
		t.Fatalf("lattice image: %v", image.err)
	}
	return image.tag
}

// buildImage compiles static Pro lattice and lattice-sandbox binaries into
// a temporary build context laid out like the repository's (bin/image/...),
// next to a copy of the Dockerfile and .dockerignore, and builds the image
// with the engine's builder. FROM scratch needs no pull.
//
// The Pro edition, because the suite needs --forward (a peer's service on
// the overlay, to carry traffic to) and `sandbox agent status` (the path to
// each peer); the community build refuses both.
func buildImage() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("repository root: %w", err)
	}
	dir, err := os.MkdirTemp("", "lattice-e2e-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, "bin", "image", "var"), 0o755); err != nil {
		return "", err
	}
	for _, name := range []string{"Dockerfile", ".dockerignore"} {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return "", err
		}
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go tool builds the binary: %w", err)
	}
	// The same flags as `make image`, so the two share the build cache.
	build := exec.CommandContext(ctx, goTool, "build", "-tags", "pro", "-trimpath", "-ldflags", "-s -w",
		"-o", filepath.Join(dir, "bin", "image")+"/", "./cmd/lattice", "./cmd/lattice-sandbox")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build (CGO_ENABLED=0, -tags pro): %w\n%s", err, out)
	}

	provider, err := testcontainers.NewDockerProvider(testcontainers.WithLogger(tclog.NewNoopLogger()))
	if err != nil {
		return "", err
	}
	defer provider.Close()
	edition := "pro"
	var buildLog bytes.Buffer
	tag, err := provider.BuildImage(ctx, &testcontainers.ContainerRequest{FromDockerfile: testcontainers.FromDockerfile{
		Context:        dir,
		Repo:           "lattice",
		Tag:            "e2e-" + randomHex(4),
		BuildArgs:      map[string]*string{"EDITION": &edition},
		BuildLogWriter: &buildLog,
		KeepImage:      true, // removed by TestMain, not by the first container's Terminate
		BuildOptionsModifier: func(o *client.ImageBuildOptions) {
			o.Labels = ownerLabels()
		},
	}})
	if err != nil {
		return "", fmt.Errorf("docker build: %w\n%s", err, &buildLog)
	}
	return tag, nil
}

// removeImage removes the image buildImage made, if any.
func removeImage() {
	if image.tag == "" || docker.cli == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if _, err := docker.cli.ImageRemove(ctx, image.tag, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: remove image %s: %v\n", image.tag, err)
	}
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
