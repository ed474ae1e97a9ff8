package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/labfile"
)

// complete asks cobra's hidden __complete command what a shell would
// offer for args, the last being the word under the cursor.
func complete(t *testing.T, args ...string) ([]string, cobra.ShellCompDirective) {
	t.Helper()
	code, out, stderr := run(t, append([]string{cobra.ShellCompRequestCmd}, args...)...)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.NotEmpty(t, lines)
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, ":"), "directive line: %q", out)
	d, err := strconv.Atoi(last[1:])
	require.NoError(t, err)
	var words []string
	for _, l := range lines[:len(lines)-1] {
		word, _, _ := strings.Cut(l, "\t")
		words = append(words, word)
	}
	return words, cobra.ShellCompDirective(d)
}

func TestCompletion(t *testing.T) {
	t.Chdir(t.TempDir())
	noFiles := cobra.ShellCompDirectiveNoFileComp
	for _, tc := range []struct {
		name      string
		args      []string
		want      []string // exactly, if wantSome is empty
		wantSome  []string // at least these
		directive cobra.ShellCompDirective
	}{
		{name: "run builtin prefix", args: []string{"run", "builtin:sandbox-pod"},
			want: []string{"builtin:sandbox-pod-policy", "builtin:sandbox-pod-socks5", "builtin:sandbox-pod"}, directive: noFiles},
		{name: "a word starting like builtin:", args: []string{"validate", "bu"},
			wantSome: []string{"builtin:blackhole-failover", "builtin:cgnat", "builtin:topologies/quickstart", "builtin:quickstart"}, directive: noFiles},
		{name: "other words are YAML files", args: []string{"validate", "top"},
			want: []string{"yaml", "yml"}, directive: cobra.ShellCompDirectiveFilterFileExt},
		{name: "validate takes many", args: []string{"validate", "builtin:cgnat", "builtin:cgnat-"},
			want: []string{"builtin:cgnat-hairpin", "builtin:cgnat-nat-reboot"}, directive: noFiles},
		{name: "graph takes one", args: []string{"graph", "builtin:cgnat", "builtin:"}, directive: noFiles},
		{name: "run --scenario offers scenarios only", args: []string{"run", "builtin:cgnat", "--scenario", "builtin:c"},
			want: []string{"builtin:cgnat-hairpin", "builtin:cgnat-nat-reboot", "builtin:control-outage", "builtin:corporate-firewall-tightens", "builtin:corporate-udp-blocked"}, directive: noFiles},
		{name: "bench --pair is a topology", args: []string{"bench", "--pair", "builtin:q"},
			want: []string{"builtin:quickstart"}, directive: noFiles},
		{name: "graph --format", args: []string{"graph", "--format", ""}, want: []string{"dot", "mermaid"}, directive: noFiles},
		{name: "graph -f", args: []string{"graph", "-f", "m"}, want: []string{"mermaid"}, directive: noFiles},
		{name: "validate --kind", args: []string{"validate", "--kind", ""}, want: []string{"topology", "scenario"}, directive: noFiles},
		{name: "schema", args: []string{"schema", ""}, want: []string{"topology", "scenario"}, directive: noFiles},
		{name: "schema takes one", args: []string{"schema", "topology", ""}, directive: noFiles},
		{name: "bench --only list", args: []string{"bench", "--only", "datapath,"},
			want: []string{"datapath,connect", "datapath,scale"}, directive: noFiles | cobra.ShellCompDirectiveNoSpace},
		{name: "run --report is a directory", args: []string{"run", "--report", ""}, directive: cobra.ShellCompDirectiveFilterDirs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, d := complete(t, tc.args...)
			assert.Equal(t, tc.directive, d)
			if len(tc.wantSome) > 0 {
				assert.Subset(t, got, tc.wantSome)
				for _, w := range got {
					assert.True(t, labfile.IsBuiltin(w), w)
				}
				return
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestCompletionCoversBuiltins: every shipped file is offered, with its
// description, under the name the commands take.
func TestCompletionCoversBuiltins(t *testing.T) {
	code, out, stderr := run(t, cobra.ShellCompRequestCmd, "run", "builtin:")
	require.Equal(t, 0, code, stderr)
	code, listed, stderr := run(t, "list", "--json")
	require.Equal(t, 0, code, stderr)
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.HasPrefix(line, ":") {
			continue
		}
		ref, desc, ok := strings.Cut(line, "\t")
		if assert.True(t, ok, "a description for %q", line) {
			assert.NotEmpty(t, desc, ref)
		}
		assert.Contains(t, listed, `"ref": "`+ref+`"`)
	}
	assert.Equal(t, strings.Count(listed, `"ref": `), strings.Count(out, "\n")-1)
}
