package main

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/topology"
)

func newSchemaCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "schema topology|scenario",
		Short: "Print the JSON Schema of the topology or scenario format",
		Long: `schema prints the JSON Schema (draft 2020-12) of a lab file format, so an
editor completes keys, shows each one's documentation and flags mistakes as
you type. The schema is generated from the same definitions the parser
uses, so the two always agree; validate still checks what a schema cannot
(names that must exist, addresses, the timeline).

With the YAML language server (VS Code's YAML extension, Neovim, Helix),
write the schema next to your files and point each file at it with a first
line comment:

  # yaml-language-server: $schema=topology.schema.json`,
		Example: `  lattice-lab schema topology > topologies/topology.schema.json
  lattice-lab schema scenario -o scenarios/scenario.schema.json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || (args[0] != "topology" && args[0] != "scenario") {
				return cli.Usagef("schema: name a format: topology or scenario")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			s := topology.Schema()
			if args[0] == "scenario" {
				s = scenario.Schema()
			}
			w := cmd.OutOrStdout()
			if output != "" {
				f, err := sudoOwner(cmd).Create(output)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			return enc.Encode(s)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "write to `FILE` instead of standard output")
	return cmd
}
