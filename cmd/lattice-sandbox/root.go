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

// newLatticeCmd is the sandbox command where lattice would have it, as
// `lattice sandbox`, for `lattice sandbox ...` exec'd into this binary
// (cmd/lattice's execSandbox). lattice's other commands are not here:
// only `sandbox` is ever exec'd.
func newLatticeCmd() *cobra.Command {
	root := &cobra.Command{Use: "lattice"}
	cli.Configure(root)
	root.AddCommand(sandboxcmd.NewCmd())
	return root
}
