package egress

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/latticelab/lattice/internal/netns"
)

// inNetns runs fn in the network namespace at path.
func inNetns(path string, fn func() error) error { return netns.Do(path, fn) }

// DefaultPinRoot is where fail-closed filters are pinned.
const DefaultPinRoot = "/sys/fs/bpf/lattice"

// bpffsRoot is the conventional bpffs mount point.
const bpffsRoot = "/sys/fs/bpf"

// pinDir returns root/iface, mounting bpffs on /sys/fs/bpf first when
// root is under it and nothing is mounted there.
func pinDir(root, iface string) (string, error) {
	if err := ensureBPFFS(root); err != nil {
		return "", err
	}
	dir := filepath.Join(root, iface)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("pin directory: %w", err)
	}
	return dir, nil
}

func ensureBPFFS(root string) error {
	if isBPFFS(root) || isBPFFS(filepath.Dir(root)) {
		return nil
	}
	if rel, err := filepath.Rel(bpffsRoot, root); err != nil || rel == ".." || len(rel) > 2 && rel[:3] == "../" {
		return fmt.Errorf("pin root %s is not on a bpffs (mount -t bpf bpffs %s)", root, root)
	}
	if isBPFFS(bpffsRoot) {
		return nil
	}
	if err := os.MkdirAll(bpffsRoot, 0o755); err != nil { //nolint:gosec // /sys/fs/bpf's usual mode
		return fmt.Errorf("bpffs: %w", err)
	}
	if err := unix.Mount("bpffs", bpffsRoot, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs on %s: %w", bpffsRoot, err)
	}
	return nil
}

func isBPFFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

// unpin removes a link pinned for iface under root, which detaches it
// unless a process still holds it. It reports whether there was one.
func unpin(root, iface string) (bool, error) {
	if !isBPFFS(root) && !isBPFFS(filepath.Dir(root)) {
		return false, nil // nothing can be pinned there
	}
	dir := filepath.Join(root, iface)
	err := os.Remove(filepath.Join(dir, "link"))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("unpin %s: %w", dir, err)
	}
	_ = os.Remove(dir)
	return true, nil
}
