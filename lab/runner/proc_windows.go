package runner

import (
	"os"
	"os/exec"
	"syscall"
)

// newProcessGroup starts cmd in a process group of its own.
func newProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}

// killGroupOnCancel starts cmd in a process group of its own; cancelling
// it kills cmd (Windows has no signal for a whole group).
func killGroupOnCancel(cmd *exec.Cmd) { newProcessGroup(cmd) }

// killPID kills process pid.
func killPID(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// pidExists reports whether process pid exists.
func pidExists(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	_ = p.Release()
	return true
}

// inodeOf has no inode to give on Windows.
func inodeOf(string) (uint64, bool) { return 0, false }
