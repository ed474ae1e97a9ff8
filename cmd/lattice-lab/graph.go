package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/lab/labfile"
)

func newGraphCmd() *cobra.Command {
	var format, output, kind string
	cmd := &cobra.Command{
		Use:   "graph FILE",
		Short: "Draw a topology as a Graphviz (DOT) or Mermaid diagram",
		Long: `graph draws the network a topology (or a scenario's topology) builds:
networks as ellipses with their prefixes, routers with their NAT profiles,
hosts with what runs on them (control, relays, STUN, nodes, sandboxes) and
their addresses, and every link labelled with its address and impairments.
Nodes made by one count are drawn as one box.

The graph is of the resolved topology, so it shows the addresses and
gateway routers lattice-lab assigns, not only those the file spells out.

--format dot prints Graphviz input (render with: dot -Tsvg), --format
mermaid a Mermaid flowchart, which GitHub renders inside a mermaid code
fence in Markdown.`,
		Example: `  # An SVG picture of a topology
  lattice-lab graph topologies/quickstart.yaml | dot -Tsvg > quickstart.svg

  # A diagram for a README or pull request
  lattice-lab graph --format mermaid topologies/cgnat.yaml

  # The topology lattice-lab run uses by default
  lattice-lab graph builtin:quickstart`,
		Args: cobra.MatchAll(cobra.ExactArgs(1), notEmpty("FILE", 1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "dot" && format != "mermaid" {
				return cli.Usagef("--format %q: want dot or mermaid", format)
			}
			f, err := lab.Load(args[0], labfile.Options{Kind: labfile.Kind(kind)})
			if err != nil {
				return err
			}
			var w io.Writer = cmd.OutOrStdout()
			if output != "" {
				file, err := sudoOwner(cmd).Create(output)
				if err != nil {
					return err
				}
				defer file.Close()
				w = file
			}
			if format == "mermaid" {
				err = f.Plan.WriteMermaid(w)
			} else {
				err = f.Plan.WriteDOT(w)
			}
			if err != nil {
				return fmt.Errorf("graph: %w", err)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&format, "format", "f", "dot", "diagram `FORMAT`: dot (Graphviz) or mermaid")
	fl.StringVarP(&output, "output", "o", "", "write to `FILE` instead of standard output")
	fl.StringVar(&kind, "kind", "", "treat FILE as a `KIND`: topology or scenario, instead of guessing")
	return cmd
}
