package main

import (
	"context"
	"net/netip"

	"golang.zx2c4.com/wireguard/tun"
	wgnetstack "golang.zx2c4.com/wireguard/tun/netstack"

	"github.com/latticelab/lattice/node"
)

// userspaceProvisioner runs the overlay on an in-process network stack.
func userspaceProvisioner() node.Provisioner { return userspaceProv{} }

type userspaceProv struct{}

func (userspaceProv) Up(_ context.Context, addr netip.Prefix, mtu int) (tun.Device, error) {
	dev, _, err := wgnetstack.CreateNetTUN([]netip.Addr{addr.Addr()}, nil, mtu)
	return dev, err
}

func netipParse(s string) (netip.Addr, error) { return netip.ParseAddr(s) }
