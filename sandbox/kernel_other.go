//go:build !linux

package sandbox

import (
	"errors"
	"log/slog"

	"github.com/latticelab/lattice/node"
)

// kernelProvisioner makes gvisor mode's wg0: Linux only.
func kernelProvisioner(string, *slog.Logger) (node.Provisioner, error) {
	return nil, errors.New("sandbox: gvisor mode runs on Linux only")
}
