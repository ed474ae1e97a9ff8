//go:build !linux

package runsc

import (
	"errors"
	"os/exec"
	"runtime"
)

// killGroupOnCancel implements the Linux one, which kills the command's
// process group; elsewhere cancelling kills the command alone.
func killGroupOnCancel(*exec.Cmd) {}

// mkfifo fails: runsc, and so its start gate, run on Linux only.
func mkfifo(path string) error {
	return errors.New("mkfifo " + path + ": runsc needs Linux, this is " + runtime.GOOS)
}
