package main

import (
	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/lab/labfile"
)

// lab loads every topology and scenario the commands name; execute holds
// its copy of the builtins for the whole command.
var lab labfile.Loader

// builtinFiles is what execute holds while a command runs.
var builtinFiles = builtinHold{&lab}

type builtinHold struct{ l *labfile.Loader }

// hold keeps the builtins' copy until release is called.
func (h builtinHold) hold() (release func() error) { return h.l.Hold() }

// notEmpty refuses an empty argument among the first n (all if n < 0),
// named what in the error: "" would otherwise be read as a file or host
// and fail as 'open : no such file or directory'.
func notEmpty(what string, n int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if n >= 0 && n < len(args) {
			args = args[:n]
		}
		for i, a := range args {
			if a == "" {
				return cli.Usagef("%s (argument %d) is empty", what, i+1)
			}
		}
		return nil
	}
}
