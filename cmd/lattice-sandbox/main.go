// Command lattice-sandbox is `lattice sandbox` alone: an agent's network
// identity (start, run, agent, exec, audit), without the control plane,
// the NATS server, the relay and STUN servers, or the node's kernel
// WireGuard and eBPF egress tooling for `lattice up`. An idle sandbox maps
// and touches a fraction of what the lattice binary would
// (docs/PERFORMANCE.md). `lattice sandbox ...` runs it, with the same
// arguments, when it lies beside lattice; installed alone, it is called
// directly:
//
//	lattice-sandbox start --name agent-1 --control tls://control:4222 --token-file token --socks5 1080
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/latticelab/lattice/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, newRootCmd(), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
