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
	"strings"
	"syscall"

	"github.com/latticelab/lattice/internal/cli"

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
  lattice sandbox   an AI agent's network identity in an isolation mode
  lattice control   registration and signaling (NATS + HTTP), IPAM, join tokens
  lattice relay     the LRP relay, for peers no direct path reaches
  lattice stun      a STUN server (RFC 8489, RFC 5780 with two addresses)
  lattice netcheck  this host's NAT type, public address, relay latency
  lattice ping      a peer over the overlay: direct or relay, round trip
  lattice version   version, commit, edition and Go toolchain

Every service listens on 127.0.0.1 unless told otherwise, logs to stderr and
stops cleanly on Ctrl-C or SIGTERM.`,
	}
	cli.Configure(root)
	root.AddCommand(newUpCmd(), newStatusCmd(), newSandboxCmd(), newControlCmd(), newRelayCmd(), newSTUNCmd(), newEgressCmd(), newNetcheckCmd(), newPingCmd(), cli.NewVersionCmd())
	return root
}

// logFlags adds -v and --log-format and returns a function building the
// logger (internal/cli.LogFlags, shared with lattice-lab).
func logFlags(cmd *cobra.Command) func() *slog.Logger { return cli.LogFlags(cmd) }

// readSecretFile reads a secret, refusing files others can read.
func readSecretFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secret file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secret file %s has mode %v; make it private: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secret file: %w", err)
	}
	return b, nil
}

// controlFlag adds --control, the control URL, and its older name
// --server-url (hidden), so scripts written for either keep working.
func controlFlag(cmd *cobra.Command, p *string, usage string) {
	f := cmd.Flags()
	f.StringVar(p, "control", "", usage)
	f.StringVar(p, "server-url", "", "old name of --control")
	_ = f.MarkHidden("server-url")
}

// tokenFlags adds --token and --token-file; joinToken reads what they say.
func tokenFlags(cmd *cobra.Command, token, tokenFile *string) {
	f := cmd.Flags()
	f.StringVar(token, "token", "", "join token (prefer --token-file or $LATTICE_TOKEN: other users can read arguments in ps)")
	f.StringVar(tokenFile, "token-file", "", "file holding the join token (mode 0600)")
}

// joinToken returns the join token from --token, --token-file or
// $LATTICE_TOKEN, in that order. It never puts the token in an error.
func joinToken(token, tokenFile string) (string, error) {
	switch {
	case token != "" && tokenFile != "":
		return "", usagef("give --token or --token-file, not both")
	case tokenFile != "":
		b, err := readSecretFile(tokenFile)
		if err != nil {
			return "", err
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return "", fmt.Errorf("token file %s is empty", tokenFile)
		}
	case token == "":
		token = strings.TrimSpace(os.Getenv("LATTICE_TOKEN"))
	}
	if token == "" {
		return "", usagef("a join token is required: --token, --token-file or $LATTICE_TOKEN")
	}
	return token, nil
}
