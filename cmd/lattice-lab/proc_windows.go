package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
)

// newSession fails: a lab in the background is handed its start-up pipe
// as an extra file, which Windows cannot pass (and live labs need Linux:
// liveDir refuses first).
func newSession(*exec.Cmd) error {
	return errors.New("a lab in the background (lattice-lab up) needs Linux")
}

// terminate stops process pid (Windows has no SIGTERM: it is killed).
func terminate(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// ownerUID has no uid to give on Windows.
func ownerUID(fs.FileInfo) (int, bool) { return 0, false }
