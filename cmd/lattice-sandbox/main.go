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
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/latticelab/lattice/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes argv (a process's arguments, its name first). lattice
// execs this binary with its own argv, `lattice sandbox ...`; the command
// then speaks as `lattice sandbox` (usage lines, error prefix, help), so
// a user sees the command they typed, not this binary's name.
func run(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	if len(argv) > 1 && argv[1] == "sandbox" && filepath.Base(argv[0]) != "lattice-sandbox" {
		return cli.Execute(ctx, newLatticeCmd(), argv[1:], stdout, stderr)
	}
	return cli.Execute(ctx, newRootCmd(), argv[1:], stdout, stderr)
}
