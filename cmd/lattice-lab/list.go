package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/lab/labfile"
)

func newListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the scenarios and topologies built into lattice-lab",
		Long: `list prints the scenario and topology files shipped inside lattice-lab, each
with its description. Any command that takes a FILE accepts builtin:NAME for
one of them (a scenario, or the topology when no scenario has that name;
builtin:topologies/NAME is the topology either way).

--json prints an array of objects with the keys name, kind (scenario or
topology), ref (what to pass as FILE), description, and for scenarios tags
and requires (pro, root, gvisor) when they have any.`,
		Example: `  lattice-lab list
  lattice-lab list --json | jq -r '.[] | select(.kind == "scenario") | .ref'
  lattice-lab run builtin:blackhole-failover
  lattice-lab graph builtin:cgnat`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := builtins()
			if asJSON {
				if jerr := writeJSON(cmd.OutOrStdout(), list); jerr != nil {
					return jerr
				}
			} else if werr := writeList(cmd.OutOrStdout(), list); werr != nil {
				return werr
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of {name, kind, ref, description, tags, requires}")
	return cmd
}

// builtin is one shipped file, as list --json prints it.
type builtin struct {
	Name        string   `json:"name"`
	Kind        string   `json:"kind"`
	Ref         string   `json:"ref"`
	Description string   `json:"description"`
	Tags        []string `json:"tags,omitempty"`
	Requires    []string `json:"requires,omitempty"`
}

// builtins lists the shipped scenarios, then the topologies, each by name.
// A file that does not load is listed without a description and named in
// the error.
func builtins() ([]builtin, error) {
	shipped, err := lab.Builtins("")
	if err != nil {
		return nil, err
	}
	var list []builtin
	var errs []error
	for _, s := range shipped {
		b := builtin{Name: s.Name, Kind: string(s.Kind), Ref: s.Ref}
		f, err := lab.Load(s.Ref, labfile.Options{Kind: s.Kind})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Ref, err))
		} else if f.Scenario != nil {
			b.Description, b.Tags, b.Requires = f.Scenario.Description, f.Scenario.Tags, f.Scenario.Requires
		} else {
			b.Description = f.Topology.Description
		}
		list = append(list, b)
	}
	return list, errors.Join(errs...)
}

// writeList prints the builtins under a heading per kind, the
// descriptions in one column after the longest name.
func writeList(w io.Writer, list []builtin) error {
	width := 0
	for _, b := range list {
		width = max(width, len(b.Name))
	}
	var out strings.Builder
	kind := ""
	for _, b := range list {
		if b.Kind != kind {
			kind = b.Kind
			title := "scenarios"
			if kind == "topology" {
				title = "topologies"
			}
			fmt.Fprintf(&out, "%s:\n", title)
		}
		fmt.Fprintf(&out, "  %-*s  %s\n", width, b.Name, b.Description)
	}
	_, err := io.WriteString(w, out.String())
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
