//go:build unix

package runner

import (
	"os/exec"
	"syscall"
)

// newProcessGroup starts cmd in a process group of its own, so that a
// signal to the lab's group (Ctrl-C) does not reach it behind the lab's
// back.
func newProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroupOnCancel starts cmd in a process group of its own and makes
// cancelling it kill the whole group, what cmd started included.
func killGroupOnCancel(cmd *exec.Cmd) {
	newProcessGroup(cmd)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

// killPID kills process pid (SIGKILL).
func killPID(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// pidExists reports whether process pid exists (signal 0).
func pidExists(pid int) bool { return syscall.Kill(pid, 0) == nil }

// inodeOf is path's inode number, if it can be read.
func inodeOf(path string) (uint64, bool) {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0, false
	}
	return uint64(st.Ino), true
}
