package runner

import (
	"errors"

	"golang.org/x/sys/unix"
)

// unmountDetached unmounts path lazily (MNT_DETACH); a path that is not a
// mount point (EINVAL) is not an error.
func unmountDetached(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return err
	}
	return nil
}
