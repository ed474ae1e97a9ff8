// Command lattice-lab runs Lattice's emulation lab: an in-process network of
// hosts, NAT routers and segments (package lab/fabric) on which scenarios run
// end to end, without root and without touching the machine's real network.
//
// Today it has one command, run, which builds a built-in default topology and
// exercises it. Topology files, scenarios, NATS and relays come later.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes, as shells and CI read them.
const (
	exitOK          = 0
	exitFailure     = 1   // a step of the run failed
	exitUsage       = 2   // bad flags or arguments, as getopt-style tools do
	exitInterrupted = 130 // 128 + SIGINT, what a shell reports for Ctrl-C
)

// usageError marks an error in how the command was invoked rather than in
// what it did, so execute can answer it with exit code 2 and a pointer to
// --help.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func main() {
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
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", root.Name(), err, cmd.CommandPath())
		return exitUsage
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "%s: interrupted (%v)\n", root.Name(), context.Cause(ctx))
		return exitInterrupted
	default:
		fmt.Fprintf(stderr, "%s: %v\n", root.Name(), err)
		return exitFailure
	}
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
It needs no root, no containers and no network access.`,
		Example: `  # Build the default topology and exercise it end to end
  lattice-lab run

  # Learn what run does and which flags it takes
  lattice-lab run --help`,
		// Without a RunE cobra would answer an unknown command with the
		// help text and success, which hides typos in scripts.
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("unknown command %q", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		// Errors are reported once, by execute, with the right exit code;
		// a failing step is not a reason to print the usage text.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newRunCmd())
	return root
}
