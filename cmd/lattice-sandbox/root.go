package main

import (
	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/sandboxcmd"
)

// newRootCmd is the sandbox command as a program of its own.
func newRootCmd() *cobra.Command {
	root := sandboxcmd.NewCmd()
	root.Use = "lattice-sandbox"
	cli.Configure(root)
	root.AddCommand(cli.NewVersionCmd())
	return root
}
