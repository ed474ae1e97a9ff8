//go:build !linux

package main

import (
	"context"
	"log/slog"
	"runtime"

	"github.com/latticelab/lattice/node"
)

// device fails: this build makes kernel interfaces (kernel WireGuard, or
// wireguard-go on a TUN device) on Linux only.
func (o wgOptions) device(context.Context, *node.Config, *slog.Logger) error {
	return usagef("--wireguard %s: a kernel interface needs Linux, this is %s; --userspace runs the node on an in-process network stack", o.mode, runtime.GOOS)
}
