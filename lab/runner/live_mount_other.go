//go:build !linux

package runner

import (
	"errors"
	"runtime"
)

// unmountDetached fails: a live lab mounts network namespaces on Linux
// only, so there is nothing of its own to unmount here.
func unmountDetached(path string) error {
	return errors.New("unmount " + path + ": not on " + runtime.GOOS)
}
