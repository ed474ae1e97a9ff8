package main

import (
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/scenarios"
	"github.com/latticelab/lattice/topologies"
)

func newListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the scenarios and topologies built into lattice-lab",
		Long: `list prints the scenario and topology files shipped inside lattice-lab, each
with its description. Any command that takes a FILE accepts builtin:NAME for
one of them (a scenario, or the topology when no scenario has that name).`,
		Example: `  lattice-lab list
  lattice-lab run builtin:blackhole-failover
  lattice-lab graph builtin:cgnat`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			for _, group := range []struct {
				title string
				fsys  fs.FS
				dir   string
			}{{"scenarios", scenarios.FS, "scenarios"}, {"topologies", topologies.FS, "topologies"}} {
				names, err := fs.Glob(group.fsys, "*.yaml")
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "%s:\n", group.title)
				for _, n := range names {
					name := strings.TrimSuffix(n, ".yaml")
					desc := ""
					kind := "topology"
					if group.dir == "scenarios" {
						kind = "scenario"
					}
					if f, err := loadFile(builtinPrefix+path.Join(group.dir, n), kind); err == nil {
						if f.scenario != nil {
							desc = f.scenario.Description
						} else {
							desc = f.topo.Description
						}
					}
					fmt.Fprintf(w, "  %-42s %s\n", name, desc)
				}
			}
			return nil
		},
	}
}
