package main

import (
	"context"
	"log/slog"

	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/wgdev"
)

// device sets cfg's Device (kernel WireGuard) or Provisioner
// (wireguard-go on a kernel TUN) as o's mode says.
func (o wgOptions) device(ctx context.Context, cfg *node.Config, log *slog.Logger) error {
	mode := o.mode
	if mode == "auto" {
		mode = "kernel"
		if err := wgdev.ProbeKernel(ctx); err != nil {
			log.Info("kernel WireGuard unavailable; running wireguard-go (wg(8) sees it through its UAPI socket)", "err", err)
			mode = "userspace"
		}
	}
	if mode == "kernel" {
		cfg.Device = &wgdev.Kernel{Name: o.ifname, NoFirewall: o.noFirewall, Logger: log}
		return nil
	}
	cfg.Provisioner = &wgdev.Userspace{KernelProvisioner: node.KernelProvisioner{Name: o.ifname, NoFirewall: o.noFirewall, Logger: log}}
	return nil
}
