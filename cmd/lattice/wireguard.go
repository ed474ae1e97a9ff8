package main

import (
	"context"
	"log/slog"
	"slices"

	"github.com/latticelab/lattice/node"
)

// wireguardModes are --wireguard's values.
var wireguardModes = []string{"auto", "kernel", "userspace"}

// wgOptions are up's flags that choose the interface and WireGuard.
type wgOptions struct {
	mode       string // --wireguard
	netstack   bool   // --userspace: the in-process network stack
	ifname     string
	noFirewall bool
}

// apply sets cfg's Provisioner or Device: kernel WireGuard through the
// bridge where `ip link add … type wireguard` works (auto says in the log
// when it does not), else wireguard-go in process on a kernel TUN with
// its UAPI socket; both are what wg(8) shows. --userspace keeps the
// in-process netstack, which no other program can see.
func (o wgOptions) apply(ctx context.Context, cfg *node.Config, log *slog.Logger) error {
	if !slices.Contains(wireguardModes, o.mode) {
		return usagef("--wireguard %q: want auto, kernel or userspace", o.mode)
	}
	if o.netstack {
		if o.mode == "kernel" {
			return usagef("--wireguard kernel makes a kernel interface; --userspace runs without one")
		}
		cfg.Provisioner = userspaceProvisioner()
		return nil
	}
	return o.device(ctx, cfg, log)
}
