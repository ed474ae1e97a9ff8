//go:build unix

package main

import (
	"io/fs"
	"os/exec"
	"syscall"
)

// newSession starts cmd in a session of its own: no terminal's hangup
// or Ctrl-C reaches it, and down finds what it started by the session
// id.
func newSession(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return nil
}

// terminate asks process pid to stop (SIGTERM).
func terminate(pid int) error { return syscall.Kill(pid, syscall.SIGTERM) }

// ownerUID is fi's owner, where the system says.
func ownerUID(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
