package runsc

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// killGroupOnCancel puts cmd in a process group of its own and makes
// cancelling it kill the whole group: a wedged runsc may have started
// helpers that would otherwise outlive it.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
}

// mkfifo makes a FIFO only its owner opens.
func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }
