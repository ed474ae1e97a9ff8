package runsc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Close releases what runsc keeps in the state directory between
// containers (it bind-mounts an empty network namespace there, for its
// gofer) once no container is left. Call it when done with the Manager.
func (m *Manager) Close() error {
	ids, err := m.List()
	if err != nil || len(ids) > 0 {
		return err
	}
	p := filepath.Join(m.stateRoot(), "null-netns")
	if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("runsc: unmount %s: %w", p, err)
	}
	_ = os.Remove(p)
	return nil
}
