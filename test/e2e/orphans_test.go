package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/moby/client"
)

// ownerLabel marks every container, network, volume and image the suite
// makes with "HOST/PID" of the test process. t.Cleanup removes them, but
// not when the process is killed (go test's -timeout, Ctrl-C, a CI
// runner's deadline); the next run then finds them by this label and
// removes those whose process is gone. Concurrent runs keep their own.
const ownerLabel = "io.lattice.e2e.owner"

// owner is this process's ownerLabel value.
var owner = func() string {
	host, _ := os.Hostname()
	return host + "/" + strconv.Itoa(os.Getpid())
}()

// ownerLabels is the label set to put on what the suite makes.
func ownerLabels() map[string]string { return map[string]string{ownerLabel: owner} }

// orphaned tells whether labels name a process on this host that is gone.
func orphaned(labels map[string]string) bool {
	host, pidStr, ok := strings.Cut(labels[ownerLabel], "/")
	if !ok {
		return false
	}
	if h, _ := os.Hostname(); h != host {
		return false
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// sweepOrphans removes what killed runs of the suite left behind:
// containers first (they hold networks and volumes), then networks,
// volumes and images.
func sweepOrphans(ctx context.Context, t *testing.T, cli *client.Client) {
	t.Helper()
	f := make(client.Filters).Add("label", ownerLabel)
	var errs []error
	removed := 0
	note := func(what, id string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", what, id, err))
			return
		}
		removed++
	}
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	errs = append(errs, err)
	for _, c := range cs.Items {
		if orphaned(c.Labels) {
			_, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			note("container", c.ID, err)
		}
	}
	ns, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	errs = append(errs, err)
	for _, n := range ns.Items {
		if orphaned(n.Labels) {
			_, err := cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{})
			note("network", n.Name, err)
		}
	}
	vs, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	errs = append(errs, err)
	for _, v := range vs.Items {
		if orphaned(v.Labels) {
			_, err := cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true})
			note("volume", v.Name, err)
		}
	}
	is, err := cli.ImageList(ctx, client.ImageListOptions{Filters: f})
	errs = append(errs, err)
	for _, img := range is.Items {
		if orphaned(img.Labels) {
			_, err := cli.ImageRemove(ctx, img.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
			note("image", img.ID, err)
		}
	}
	if removed > 0 {
		t.Logf("removed %d leftovers of earlier runs that were killed", removed)
	}
	if err := errors.Join(errs...); err != nil {
		t.Logf("removing leftovers of earlier runs: %v", err)
	}
}
