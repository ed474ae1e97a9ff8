package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/labfile"
	"github.com/latticelab/lattice/scenarios"
	"github.com/latticelab/lattice/topologies"
)

// shippedNames lists the base names of fsys's top-level YAML files.
func shippedNames(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	files, err := fs.Glob(fsys, "*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for i, f := range files {
		files[i] = strings.TrimSuffix(f, ".yaml")
	}
	return files
}

// TestListFromAnyDirectory: list works outside the repository, gives every
// builtin a description, and keeps the descriptions in one column however
// long a name is.
func TestListFromAnyDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	code, out, stderr := run(t, "list")
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	assert.Empty(t, stderr)

	groups := map[string]map[string]string{}
	var group string
	descCol := -1
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if !strings.HasPrefix(line, " ") {
			group = strings.TrimSuffix(line, ":")
			groups[group] = map[string]string{}
			continue
		}
		fields := strings.Fields(line)
		require.GreaterOrEqual(t, len(fields), 2, "a name and a description: %q", line)
		name := fields[0]
		desc := strings.TrimLeft(line[strings.Index(line, name)+len(name):], " ")
		at := len(line) - len(desc)
		if descCol < 0 {
			descCol = at
		}
		assert.Equal(t, descCol, at, "description column of %q", line)
		assert.Less(t, len(name)+2, at, "at least two spaces after %q", name)
		groups[group][name] = desc
	}
	for _, g := range []struct {
		title string
		fsys  fs.FS
	}{{"scenarios", scenarios.FS}, {"topologies", topologies.FS}} {
		for _, name := range shippedNames(t, g.fsys) {
			desc, ok := groups[g.title][name]
			if assert.True(t, ok, "%s %s listed", g.title, name) {
				assert.NotEmpty(t, desc, "%s %s has a description", g.title, name)
			}
		}
		assert.Len(t, groups[g.title], len(shippedNames(t, g.fsys)), g.title)
	}
}

// TestListJSON pins list --json's shape: one object per builtin with
// snake_case keys, and ref is what to pass to the other commands.
func TestListJSON(t *testing.T) {
	t.Chdir(t.TempDir())
	code, out, stderr := run(t, "list", "--json")
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	var raw []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	require.Len(t, raw, len(shippedNames(t, scenarios.FS))+len(shippedNames(t, topologies.FS)))
	byRef := map[string]map[string]any{}
	for _, e := range raw {
		byRef[e["ref"].(string)] = e
	}
	assert.Equal(t, map[string]any{
		"name":        "sandbox-pod-policy",
		"kind":        "scenario",
		"ref":         "builtin:sandbox-pod-policy",
		"description": "A pod sandbox with an egress policy and an inbound forward (Pro).",
		"tags":        []any{"sandbox", "pod", "pro"},
		"requires":    []any{"pro"},
	}, byRef["builtin:sandbox-pod-policy"])
	assert.Equal(t, map[string]any{
		"name":        "cgnat",
		"kind":        "topology",
		"ref":         "builtin:cgnat",
		"description": "Two homes behind one carrier-grade NAT (double NAT, hairpinning) and a plain home outside.",
	}, byRef["builtin:cgnat"])
	// A topology that shares its name with a scenario is reached by its path.
	require.Contains(t, byRef, "builtin:topologies/quickstart")
	assert.Equal(t, "topology", byRef["builtin:topologies/quickstart"]["kind"])
	assert.Equal(t, "scenario", byRef["builtin:quickstart"]["kind"])
	for ref, e := range byRef {
		assert.NotEmpty(t, e["description"], ref)
	}
}

// TestBuiltinFromAnyDirectory: a builtin whose topology names an egress
// policy file loads outside the repository, and the files written for it
// are gone once the command returns.
func TestBuiltinFromAnyDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("TMPDIR", t.TempDir())
	for _, name := range []string{"builtin:sandbox-pod-policy", "builtin:sandbox-gvisor-policy"} {
		code, out, stderr := run(t, "validate", name)
		assert.Equal(t, 0, code, "%s\n%s", out, stderr)
		assert.Contains(t, out, "✓ scenarios/"+strings.TrimPrefix(name, labfile.Prefix)+".yaml: scenario ")
	}
	left, err := os.ReadDir(os.Getenv("TMPDIR"))
	require.NoError(t, err)
	assert.Empty(t, left, "files left behind in %s", os.Getenv("TMPDIR"))
}
