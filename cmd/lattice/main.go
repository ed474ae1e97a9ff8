// Command lattice runs Lattice's services and nodes: the control plane
// (registration and signaling over NATS and HTTP), the LRP relay, a STUN
// server, and, later, nodes and sandboxes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// usageError is a mistake in how the command was invoked (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var ue usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "lattice: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return exitUsage
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return exitInterrupted
	default:
		fmt.Fprintf(stderr, "lattice: %v\n", err)
		return exitFailure
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "lattice",
		Short: "Lattice mesh overlay: control plane, relay, STUN",
		Long: `lattice runs the pieces of a Lattice mesh network.

  lattice control   registration and signaling (NATS + HTTP), IPAM, join tokens
  lattice relay     the LRP relay, for peers no direct path reaches
  lattice stun      a STUN server (RFC 8489, RFC 5780 with two addresses)

Every service listens on 127.0.0.1 unless told otherwise, logs to stderr and
stops cleanly on Ctrl-C or SIGTERM.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newUpCmd(), newStatusCmd(), newControlCmd(), newRelayCmd(), newSTUNCmd())
	return root
}

// logFlags adds -v and returns a function building the logger.
func logFlags(cmd *cobra.Command) func() *slog.Logger {
	verbose := cmd.Flags().BoolP("verbose", "v", false, "debug logs")
	return func() *slog.Logger {
		level := slog.LevelInfo
		if *verbose {
			level = slog.LevelDebug
		}
		return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	}
}

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
