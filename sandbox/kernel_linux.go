package sandbox

import (
	"log/slog"

	"github.com/latticelab/lattice/node"
)

// kernelProvisioner makes gvisor mode's wg0.
func kernelProvisioner(name string, log *slog.Logger) (node.Provisioner, error) {
	return &node.KernelProvisioner{Name: name, Logger: log}, nil
}
