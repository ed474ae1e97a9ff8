package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/labfile"
	"github.com/latticelab/lattice/lab/topology"
)

type validateOptions struct {
	kind    string
	json    bool
	noBuild bool
}

func newValidateCmd() *cobra.Command {
	var opts validateOptions
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check topology and scenario files and report every problem",
		Long: `validate checks topology and scenario files without running them, and
reports every problem of every file at once, each as FILE:LINE:COL, the path
of the value in the document, what is wrong and, where it helps, how to fix
it:

  topologies/cgnat.yaml:20:13: networks.home1.uplink: no network "carier"; did you mean "carrier"?

It checks the syntax (unknown keys, values of the wrong type or out of
range), then the meaning: names used twice or naming nothing, addresses off
their network or taken twice, uplink loops, overlapping prefixes with no NAT
between them, two services on one port, services a node cannot reach through
its NATs, scenario steps that act on nodes that are not running at that
point of the timeline, and a scenario's topology file with it. Finally it
builds each topology's network on the emulation fabric (no services, no
nodes), which takes well under a second.

Whether a file is a topology or a scenario is told from its top-level keys
(a scenario has steps:); --kind says it outright. builtin:NAME names a file
shipped inside lattice-lab (lattice-lab list shows them).

Exit status: 0 when every file is valid, 1 when any is not, 2 for bad
flags.`,
		Example: `  # Check a topology and a scenario
  lattice-lab validate topologies/cgnat.yaml scenarios/cgnat-hairpin.yaml

  # Check everything in the repository, as CI does
  lattice-lab validate topologies/*.yaml scenarios/*.yaml

  # Machine-readable problems, for an editor or a CI annotation step
  lattice-lab validate --json scenarios/*.yaml`,
		Args: cobra.MatchAll(cobra.MinimumNArgs(1), notEmpty("FILE", -1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.kind != "" && opts.kind != "topology" && opts.kind != "scenario" {
				return cli.Usagef("--kind %q: want topology or scenario", opts.kind)
			}
			return validate(cmd.OutOrStdout(), args, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.kind, "kind", "", "treat every FILE as a `KIND`: topology or scenario, instead of guessing")
	fl.BoolVar(&opts.json, "json", false, "print a JSON array of {file, kind, name, valid, summary, problems}; kind is left out only for a file that cannot be read")
	fl.BoolVar(&opts.noBuild, "no-build", false, "skip building the network on the fabric")
	return cmd
}

// validation is one file's verdict, as --json prints it.
type validation struct {
	File     string              `json:"file"`
	Kind     string              `json:"kind,omitempty"`
	Name     string              `json:"name,omitempty"`
	Valid    bool                `json:"valid"`
	Summary  string              `json:"summary,omitempty"`
	Problems []*strictyaml.Error `json:"problems,omitempty"`
}

func validate(out io.Writer, paths []string, opts validateOptions) error {
	var results []validation
	for _, p := range paths {
		results = append(results, validateOne(p, opts))
	}
	bad := 0
	for _, r := range results {
		if !r.Valid {
			bad++
		}
	}
	if opts.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			if r.Valid {
				fmt.Fprintf(out, "✓ %s: %s %s: %s\n", r.File, r.Kind, r.Name, r.Summary)
				continue
			}
			n := len(r.Problems)
			fmt.Fprintf(out, "✗ %s: %s\n", r.File, plural(n, "problem"))
			for _, e := range r.Problems {
				fmt.Fprintf(out, "  %s\n", e)
			}
		}
		if len(results) > 1 {
			fmt.Fprintf(out, "\n%d of %d files valid\n", len(results)-bad, len(results))
		}
	}
	if bad > 0 {
		return cli.ExitCode{Code: cli.ExitFailure}
	}
	return nil
}

func validateOne(p string, opts validateOptions) validation {
	v := validation{File: p, Kind: opts.kind}
	f, err := lab.Load(p, labfile.Options{Kind: labfile.Kind(opts.kind)})
	if err != nil {
		v.Kind = string(lab.GuessKind(p, labfile.Kind(opts.kind)))
		var es *strictyaml.Errors
		if errors.As(err, &es) {
			v.Problems = es.List
			if es.Dropped > 0 {
				v.Problems = append(v.Problems, &strictyaml.Error{File: p, Msg: fmt.Sprintf("%d more problems not shown", es.Dropped)})
			}
		} else {
			v.Problems = []*strictyaml.Error{{File: p, Msg: err.Error()}}
		}
		return v
	}
	v.File, v.Kind, v.Name, v.Summary = f.Path, string(f.Kind), f.Name(), summary(f.Plan)
	if f.Scenario != nil {
		v.Summary = fmt.Sprintf("%s on topology %s (%s)", plural(len(f.Scenario.Steps), "step"), f.Plan.Name, v.Summary)
	}
	if !opts.noBuild {
		if err := dryBuild(f); err != nil {
			v.Problems = []*strictyaml.Error{{File: f.Path, Msg: "the network does not build: " + err.Error(),
				Hint: "this is a gap in validation; please report it"}}
			return v
		}
	}
	v.Valid = true
	return v
}

// dryBuild builds a plan's network on a fabric and tears it down.
func dryBuild(f *labfile.File) error {
	for _, h := range f.Plan.Hosts {
		if h.Kind == "netns" {
			return nil // namespaces need root; the plan's checks stand
		}
	}
	fab, err := fabric.New(fabric.Config{Seed: f.Plan.Seed})
	if err != nil {
		return err
	}
	return errors.Join(f.Plan.AddTo(fab), fab.Close())
}

// summary says what a plan holds, in one line.
func summary(p *topology.Plan) string {
	var parts []string
	count := func(n int, one, many string) {
		if n == 1 {
			parts = append(parts, "1 "+one)
		} else if n > 1 {
			parts = append(parts, fmt.Sprintf("%d %s", n, many))
		}
	}
	count(len(p.Networks), "network", "networks")
	count(len(p.Routers), "router", "routers")
	count(len(p.Hosts), "host", "hosts")
	count(len(p.Nodes), "node", "nodes")
	var svc []string
	if p.Control != nil {
		svc = append(svc, "control")
	}
	if n := len(p.Relays); n > 0 {
		svc = append(svc, plural(n, "relay"))
	}
	if n := len(p.STUN); n > 0 {
		svc = append(svc, plural(n, "STUN server"))
	}
	if n := len(p.DNS); n > 0 {
		svc = append(svc, plural(n, "DNS server"))
	}
	s := strings.Join(parts, ", ")
	if len(svc) > 0 {
		s += "; " + strings.Join(svc, ", ")
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
