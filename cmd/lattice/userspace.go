package main

import (
	"net/netip"

	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/node"
)

// userspaceProvisioner runs the overlay on the in-process netstack: no
// root, no TUN device.
func userspaceProvisioner() node.Provisioner { return &netstack.SandboxProvisioner{} }

func netipParse(s string) (netip.Addr, error) { return netip.ParseAddr(s) }
