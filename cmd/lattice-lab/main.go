// Command lattice-lab runs Lattice's emulation lab: an in-process network of
// hosts, NAT routers and segments (package lab/fabric) on which scenarios run
// end to end, without root and without touching the machine's real network.
//
// Its commands: run (a scenario, or a topology's reachability), validate,
// graph, schema and bench; up, inspect, exec, do, capture and down for a
// lab kept running in the background to explore by hand. Topology and
// scenario files are described by packages lab/topology and lab/scenario;
// lab/runner runs them.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/owner"
	"github.com/latticelab/lattice/lab/runner"

	"github.com/spf13/cobra"
)

func main() {
	runner.MaybeRunChild() // a gvisor sandbox's child is this binary, re-executed
	// Ctrl-C and SIGTERM cancel ctx; every step honours it and the fabric is
	// closed on the way out, so an interrupted run still leaves complete
	// capture files behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs the command line args and returns the process exit code.
// Progress goes to stdout; errors and logs go to stderr.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	release := builtinFiles.hold()
	code := cli.Execute(ctx, newRootCmd(), args, stdout, stderr)
	if err := release(); err != nil {
		fmt.Fprintf(stderr, "lattice-lab: %v\n", err)
	}
	return code
}

// newRootCmd returns the lattice-lab command tree. It holds no state of its
// own: everything a run needs comes from its flags and the context.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "lattice-lab",
		Short: "Lattice's network emulation lab",
		Long: `lattice-lab runs Lattice on an emulated network built in-process: segments,
hosts with their own TCP/IP stacks and routers that NAT and filter the way home
routers, carrier-grade NATs and corporate firewalls do (RFC 4787 / RFC 5382).
It needs no root, no containers and no network access.

A topology file describes the network (segments, NAT profiles or RFC 4787
knobs, link impairments) and what runs on it (control with NATS, relays,
STUN, Lattice nodes, pod sandboxes); a scenario file names a topology and a
timeline of steps: wait for a direct path, transfer data, cut the direct
path, reboot a NAT, stop the relay, and check what happens. go test
./scenarios/... runs every shipped scenario.`,
		Example: `  # Bring the quickstart topology up and exercise it end to end
  lattice-lab run

  # Check files, draw a topology, get the schema for your editor
  lattice-lab validate topologies/*.yaml scenarios/*.yaml
  lattice-lab graph topologies/cgnat.yaml | dot -Tsvg > cgnat.svg
  lattice-lab schema topology > topology.schema.json

  # Run a scenario with an HTML report
  lattice-lab run scenarios/blackhole-failover.yaml --report out/

  # Learn what a command does and which flags it takes
  lattice-lab run --help

  # Tab completion of commands, flags and builtin:NAME (b<Tab>); also zsh, fish
  source <(lattice-lab completion bash)`,
	}
	cli.Configure(root)
	root.AddCommand(newRunCmd(), newValidateCmd(), newGraphCmd(), newSchemaCmd(), newBenchCmd(), newListCmd())
	root.AddCommand(newUpCmd(), newInspectCmd(), newExecCmd(), newDoCmd(), newCaptureCmd(), newDownCmd())
	root.AddCommand(cli.NewVersionCmd())
	registerCompletions(root)
	return root
}

// sudoOwner is whom the files a command creates for its user belong to:
// under sudo, the user who ran it, so they need no sudo to remove. A file
// that cannot be given away is a warning on stderr. Only outputs the user
// named go through it, never the lab's state.
func sudoOwner(cmd *cobra.Command) owner.Owner {
	return owner.Sudo(cli.NewLogger(cmd.ErrOrStderr(), cli.LogText, slog.LevelWarn))
}
