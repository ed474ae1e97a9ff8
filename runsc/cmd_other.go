//go:build !linux

package runsc

import "os/exec"

// killGroupOnCancel implements the Linux one, which kills the command's
// process group; elsewhere cancelling kills the command alone.
func killGroupOnCancel(*exec.Cmd) {}
