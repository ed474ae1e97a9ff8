//go:build !linux

package netns

import (
	"errors"
	"runtime"
)

// Do fails: network namespaces are Linux's.
func Do(path string, fn func() error) error {
	return errors.New("netns: enter " + path + ": network namespaces need Linux, this is " + runtime.GOOS)
}
