package main

import (
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/lab/labfile"
)

// registerCompletions adds shell completion (lattice-lab completion
// bash|zsh|fish|powershell) to the commands under root: builtin:NAME and
// YAML files for FILE arguments and flags, and the values of enum flags.
func registerCompletions(root *cobra.Command) {
	anyFile, scenarioFiles, topologyFiles := completeLabFile(""), completeLabFile(labfile.Scenario), completeLabFile(labfile.Topology)
	kinds := choices("topology", "a network and what runs on it", "scenario", "a topology and a timeline of steps")
	for _, c := range root.Commands() {
		flag := func(name string, f cobra.CompletionFunc) {
			if c.Flags().Lookup(name) != nil {
				cobra.CheckErr(c.RegisterFlagCompletionFunc(name, f))
			}
		}
		dirs := func(names ...string) {
			for _, n := range names {
				if c.Flags().Lookup(n) != nil {
					cobra.CheckErr(c.MarkFlagDirname(n))
				}
			}
		}
		switch c.Name() {
		case "run":
			c.ValidArgsFunction = oneArg(anyFile)
			flag("scenario", scenarioFiles)
			dirs("capture", "report", "state")
		case "validate":
			c.ValidArgsFunction = anyFile
			flag("kind", kinds)
		case "graph":
			c.ValidArgsFunction = oneArg(anyFile)
			flag("kind", kinds)
			flag("format", choices("dot", "Graphviz input (dot -Tsvg)", "mermaid", "a Mermaid flowchart"))
		case "bench":
			flag("pair", topologyFiles)
			flag("scale", topologyFiles)
			flag("only", completeList("datapath", "connect", "scale"))
			dirs("out")
		case "schema":
			// ValidArgs lists topology and scenario; no files after them.
			c.ValidArgsFunction = oneArg(kinds)
		}
	}
}

// choices completes one of fixed values, given as value, description pairs.
func choices(pairs ...string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var out []cobra.Completion
		for i := 0; i+1 < len(pairs); i += 2 {
			if strings.HasPrefix(pairs[i], toComplete) {
				out = append(out, cobra.CompletionWithDesc(pairs[i], pairs[i+1]))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// oneArg completes f for the first argument and nothing after it.
func oneArg(f cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return f(cmd, args, toComplete)
	}
}

// completeLabFile completes a FILE of kind ("" for either): the shipped
// builtin:NAME files once the word starts like "builtin:", YAML files
// otherwise, since a shell shows either the one list or the other.
func completeLabFile(kind labfile.Kind) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if toComplete == "" || !(strings.HasPrefix(labfile.Prefix, toComplete) || labfile.IsBuiltin(toComplete)) {
			return []cobra.Completion{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
		}
		var out []cobra.Completion
		for _, b := range builtinRefs(kind) {
			if strings.HasPrefix(b.ref, toComplete) {
				out = append(out, cobra.CompletionWithDesc(b.ref, b.description))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

type builtinRef struct{ ref, description string }

// builtinRefs lists what builtin:… names the shipped files of kind ("" for
// both) by, each with its description. Only the description is decoded:
// completion runs on every Tab and need not check the files.
func builtinRefs(kind labfile.Kind) []builtinRef {
	shipped, _ := lab.Builtins(kind) // nothing to offer if the files cannot be listed
	var refs []builtinRef
	for _, b := range shipped {
		var head struct {
			Description string `yaml:"description"`
		}
		if data, err := lab.Read(b.Ref, b.Kind); err == nil {
			_ = yaml.Unmarshal(data, &head) // a file that does not decode is listed without one
		}
		refs = append(refs, builtinRef{b.Ref, head.Description})
	}
	return refs
}

// completeList completes a comma-separated list of values, each once.
func completeList(values ...string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		done, last := "", toComplete
		if i := strings.LastIndex(toComplete, ","); i >= 0 {
			done, last = toComplete[:i+1], toComplete[i+1:]
		}
		given := strings.Split(done, ",")
		var out []cobra.Completion
		for _, v := range values {
			if strings.HasPrefix(v, last) && !slices.Contains(given, v) {
				out = append(out, done+v)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
}
