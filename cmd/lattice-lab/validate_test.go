package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := execute(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestValidateShipped(t *testing.T) {
	files, err := filepath.Glob("../../topologies/*.yaml")
	require.NoError(t, err)
	more, err := filepath.Glob("../../scenarios/*.yaml")
	require.NoError(t, err)
	files = append(files, more...)
	code, out, stderr := run(t, append([]string{"validate"}, files...)...)
	assert.Equal(t, 0, code, "%s%s", out, stderr)
	assert.Contains(t, out, "✓ ../../topologies/quickstart.yaml: topology quickstart: 5 networks, 4 routers, 4 hosts, 3 nodes; control, 1 relay, 1 STUN server\n")
	assert.Contains(t, out, "✓ ../../topologies/nat64-mobile.yaml: topology nat64-mobile: 3 networks, 2 routers, 4 hosts, 2 nodes; control, 1 relay, 1 STUN server, 1 DNS server\n")
}

func TestValidateProblems(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("networks:\n  lan: {cidr: 10.0.0.0/33}\nnodes: {a: {network: lann}}\n"), 0o644))
	code, out, stderr := run(t, "validate", bad, "builtin:quickstart")
	assert.Equal(t, 1, code)
	assert.Empty(t, stderr)
	assert.Equal(t, "✗ "+bad+": 3 problems\n"+
		"  "+bad+":2:15: networks.lan.cidr: want a CIDR prefix such as 192.168.1.0/24, got \"10.0.0.0/33\"\n"+
		"  "+bad+":3:9: nodes: nodes need a control service to register with; add control: {host: NAME} or control: {network: NAME}\n"+
		"  "+bad+":3:22: nodes.a.network: no network \"lann\"; did you mean \"lan\"?\n"+
		"✓ scenarios/quickstart.yaml: scenario quickstart: 18 steps on topology quickstart (5 networks, 4 routers, 4 hosts, 3 nodes; control, 1 relay, 1 STUN server)\n"+
		"\n1 of 2 files valid\n", out)

	code, out, _ = run(t, "validate", "--json", bad)
	assert.Equal(t, 1, code)
	var got []validation
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got, 1)
	assert.False(t, got[0].Valid)
	assert.Len(t, got[0].Problems, 3)
	assert.Equal(t, "nodes.a.network", got[0].Problems[2].Path)

	code, out, _ = run(t, "validate", filepath.Join(dir, "missing.yaml"))
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "no such file or directory")

	code, _, stderr = run(t, "validate", "--kind", "nope", bad)
	assert.Equal(t, 2, code)
	assert.Equal(t, "lattice-lab: --kind \"nope\": want topology or scenario\nRun 'lattice-lab validate --help' for usage.\n", stderr)
}

func TestGraphAndSchema(t *testing.T) {
	code, out, stderr := run(t, "graph", "builtin:quickstart")
	require.Equal(t, 0, code, stderr)
	assert.True(t, strings.HasPrefix(out, "graph \"quickstart\" {\n"), out)
	code, out, _ = run(t, "graph", "-f", "mermaid", "../../topologies/quickstart.yaml")
	require.Equal(t, 0, code)
	assert.True(t, strings.HasPrefix(out, "flowchart BT\n"), out)
	code, _, stderr = run(t, "graph", "-f", "png", "builtin:quickstart")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--format "png": want dot or mermaid`)

	for _, kind := range []string{"topology", "scenario"} {
		code, out, stderr = run(t, "schema", kind)
		require.Equal(t, 0, code, stderr)
		var s map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &s))
		assert.Equal(t, "urn:lattice:lattice-lab:"+kind+":v1", s["$id"])
	}
	code, _, stderr = run(t, "schema", "policy")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "schema: name a format: topology or scenario")
}

// TestValidateJSONKind: --json names the kind of an invalid file too,
// guessed as for a valid one or as --kind says.
func TestValidateJSONKind(t *testing.T) {
	dir := t.TempDir()
	badTopo := filepath.Join(dir, "topo.yaml")
	require.NoError(t, os.WriteFile(badTopo, []byte("networks:\n  lan: {cidr: 10.0.0.0/33}\n"), 0o644))
	badScenario := filepath.Join(dir, "scenario.yaml")
	require.NoError(t, os.WriteFile(badScenario, []byte("topology: nowhere.yaml\nsteps: []\n"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{name: "guessed", args: []string{badTopo, badScenario}, want: []string{"topology", "scenario"}},
		{name: "forced", args: []string{"--kind", "scenario", badTopo}, want: []string{"scenario"}},
		{name: "builtin forced", args: []string{"--kind", "scenario", "builtin:topologies/cgnat"}, want: []string{"scenario"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := run(t, append([]string{"validate", "--json"}, tc.args...)...)
			require.Equal(t, 1, code, stderr)
			var got []map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &got))
			require.Len(t, got, len(tc.want))
			for i, g := range got {
				assert.Equal(t, false, g["valid"])
				assert.Equal(t, tc.want[i], g["kind"], "%v", g["file"])
				assert.NotEmpty(t, g["problems"])
			}
		})
	}
}

// TestValidateSeedRange: the seed's range is stated exactly, 2^64-1.
func TestValidateSeedRange(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "seed.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("seed: -1\nnetworks: {lan: {cidr: 10.0.0.0/24}}\n"), 0o644))
	code, out, _ := run(t, "validate", bad)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, bad+":1:7: seed: want an integer from 0 to 18446744073709551615, got -1\n")
}

// TestEmptyArguments: an empty FILE, HOST or STEP is a usage error naming
// it, not 'open : no such file or directory' (or a validate problem with
// no file name).
func TestEmptyArguments(t *testing.T) {
	state := filepath.Join(t.TempDir(), "no-lab")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"run", []string{"run", ""}, "FILE (argument 1) is empty"},
		{"graph", []string{"graph", ""}, "FILE (argument 1) is empty"},
		{"validate", []string{"validate", "builtin:quickstart", ""}, "FILE (argument 2) is empty"},
		{"up", []string{"up", "", "--state", state}, "FILE (argument 1) is empty"},
		{"do", []string{"do", "", "--state", state}, "STEP (argument 1) is empty"},
		{"exec", []string{"exec", "", "--state", state, "--", "true"}, "HOST (argument 1) is empty"},
		{"capture", []string{"capture", "", "-w", "-", "--state", state}, "NETWORK|HOST (argument 1) is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := run(t, tc.args...)
			assert.Equal(t, 2, code, "%s\n%s", out, stderr)
			assert.Contains(t, stderr, tc.want)
		})
	}
}
