// Command lattice runs Lattice's services and nodes: the control plane
// (registration and signaling over NATS and HTTP), the LRP relay, a STUN
// server, and, later, nodes and sandboxes.
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
	"github.com/latticelab/lattice/internal/sandboxcmd"

	"github.com/spf13/cobra"
)

// Exit codes and usage errors are shared with the other commands.
const (
	exitOK          = cli.ExitOK
	exitFailure     = cli.ExitFailure
	exitUsage       = cli.ExitUsage
	exitInterrupted = cli.ExitInterrupted
)

type usageError = cli.UsageError

var usagef = cli.Usagef

func main() {
	if len(os.Args) > 1 && os.Args[1] == "sandbox" {
		if err := execSandbox(os.Args); err != nil {
			fmt.Fprintln(os.Stderr, "lattice:", err)
			os.Exit(exitFailure)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Execute(ctx, newRootCmd(), args, stdout, stderr)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "lattice",
		Short: "Lattice mesh overlay: nodes, agent sandboxes, control plane, relay, STUN",
		Long: `lattice runs the pieces of a Lattice mesh network.

  lattice up        a node: register, reach every peer, direct when NATs allow
  lattice status    the running node's peers: state, path, endpoint, RTT
  lattice sandbox   an AI agent's network identity in an isolation mode
  lattice control   registration and signaling (NATS + HTTP), IPAM, join tokens
  lattice relay     the LRP relay, for peers no direct path reaches
  lattice stun      a STUN server (RFC 8489, RFC 5780 with two addresses)
  lattice netcheck  this host's NAT type, public address, relay latency
  lattice ping      a peer over the overlay: direct or relay, round trip
  lattice egress    clear the egress filter a node left behind
  lattice version   version, commit, edition and Go toolchain

Every service listens on 127.0.0.1 unless told otherwise, logs to stderr and
stops cleanly on Ctrl-C or SIGTERM.`,
	}
	cli.Configure(root)
	root.AddCommand(newUpCmd(), newStatusCmd(), sandboxcmd.NewCmd(), newControlCmd(), newRelayCmd(), newSTUNCmd(), newEgressCmd(), newNetcheckCmd(), newPingCmd(), cli.NewVersionCmd())
	return root
}

// logFlags adds -v and --log-format and returns a function building the
// logger (internal/cli.LogFlags, shared with lattice-lab).
func logFlags(cmd *cobra.Command) func() *slog.Logger { return cli.LogFlags(cmd) }
