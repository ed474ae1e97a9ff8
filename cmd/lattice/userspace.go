package main

import (
	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/node"
)

// userspaceProvisioner runs the overlay on the in-process netstack: no
// root, no TUN device.
func userspaceProvisioner() node.Provisioner { return &netstack.SandboxProvisioner{} }
