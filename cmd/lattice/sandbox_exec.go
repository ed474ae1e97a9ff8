package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// sandboxBinary is what `lattice sandbox` runs when it lies beside
// lattice: the sandbox command alone (cmd/lattice-sandbox). An idle
// sandbox then maps a third less of a binary, and none of control, NATS
// or the relay server (docs/PERFORMANCE.md).
const sandboxBinary = "lattice-sandbox"

// execSandbox replaces this process with lattice-sandbox from lattice's
// own directory, with argv (this process's own: `lattice sandbox ...`,
// which lattice-sandbox takes as its cue to speak as `lattice sandbox`
// and which ps shows as typed), keeping the process ID, environment and
// open files: to the caller it is the same process. It returns nil,
// having done nothing, when there is no lattice-sandbox there (lattice
// then runs the command itself), and an error only when one is there
// but could not be run.
func execSandbox(argv []string) error {
	self, err := os.Executable()
	if err != nil {
		return nil //nolint:nilerr // no path to look beside: lattice runs the command itself
	}
	bin := filepath.Join(filepath.Dir(self), sandboxBinary)
	fi, err := os.Stat(bin)
	if errors.Is(err, os.ErrNotExist) || (err == nil && (fi.IsDir() || fi.Mode()&0o111 == 0)) {
		return nil
	}
	if err == nil {
		err = syscall.Exec(bin, argv, os.Environ()) //nolint:gosec // lattice-sandbox beside this binary, with the user's own arguments
	}
	return fmt.Errorf("sandbox: run %s: %w", bin, err)
}
