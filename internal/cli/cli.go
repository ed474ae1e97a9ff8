// Package cli holds what Lattice's commands share: exit codes, usage
// errors, and running a cobra tree so that errors are reported once with
// the right code.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes, as shells and CI read them.
const (
	ExitOK          = 0
	ExitFailure     = 1   // the command failed
	ExitUsage       = 2   // bad flags or arguments, as getopt-style tools do
	ExitInterrupted = 130 // 128 + SIGINT, what a shell reports for Ctrl-C
)

// UsageError marks a mistake in how a command was invoked rather than in
// what it did: Execute answers it with ExitUsage and a pointer to --help.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef formats a UsageError.
func Usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

// ExitCode makes Execute end the process with Code and print nothing: a
// command that runs another (lattice sandbox run -- CMD) passes on its
// exit status this way.
type ExitCode struct{ Code int }

func (e ExitCode) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Configure makes root report errors only through Execute, treat flag
// errors as usage errors, and refuse unknown subcommands (cobra would
// otherwise print help and succeed, hiding typos in scripts).
func Configure(root *cobra.Command) {
	root.SilenceErrors = true
	root.SilenceUsage = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return UsageError{err} })
	root.Args = func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return UsageError{fmt.Errorf("unknown command %q", args[0])}
		}
		return nil
	}
	if root.RunE == nil && root.Run == nil {
		root.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
}

// Execute runs root with args and returns the process exit code. Errors
// go to stderr, once.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SetArgs(args)
	root.SetOut(stdout) // before the completion command, which keeps it
	root.SetErr(stderr)
	// cobra adds help and completion while executing; added now, they are
	// checked as every other command is.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd(args...)
	strictHelp(root)
	usageArgs(root)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var ue UsageError
	var ec ExitCode
	switch {
	case errors.As(err, &ec):
		return ec.Code
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", root.Name(), err, cmd.CommandPath())
		return ExitUsage
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "%s: interrupted (%v)\n", root.Name(), context.Cause(ctx))
		return ExitInterrupted
	default:
		fmt.Fprintf(stderr, "%s: %v\n", root.Name(), err)
		return ExitFailure
	}
}

// usageArgs makes every positional-argument check in the tree (cobra.NoArgs,
// ExactArgs, ...) report a UsageError, so a stray argument exits with
// ExitUsage like a bad flag does.
func usageArgs(cmd *cobra.Command) {
	if cmd.HasSubCommands() && !cmd.Runnable() {
		// A group (lattice egress, lattice sandbox agent): cobra would
		// print its help and succeed on a mistyped subcommand.
		cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		if cmd.Args == nil {
			cmd.Args = func(c *cobra.Command, args []string) error {
				if len(args) > 0 {
					return UsageError{fmt.Errorf("unknown command %q for %q", args[0], c.CommandPath())}
				}
				return nil
			}
		}
	}
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				var ue UsageError
				if errors.As(err, &ue) {
					return err
				}
				return UsageError{err}
			}
			return nil
		}
	}
	for _, c := range cmd.Commands() {
		usageArgs(c)
	}
}

// strictHelp makes `help TOPIC` a usage error when TOPIC is no command:
// cobra prints the root's help and succeeds.
func strictHelp(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.Name() != "help" || c.Run == nil {
			continue
		}
		run := c.Run
		c.Run = nil
		c.RunE = func(c *cobra.Command, args []string) error {
			if found, rest, err := c.Root().Find(args); found == nil || err != nil || len(rest) > 0 {
				return UsageError{fmt.Errorf("unknown help topic %q", strings.Join(args, " "))}
			}
			run(c, args)
			return nil
		}
	}
}
