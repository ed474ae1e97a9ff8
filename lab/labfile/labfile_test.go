package labfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/labfile"
)

// A topology whose pod sandbox names an egress policy next to it.
const policedTopology = `name: policed
networks:
  internet: {cidr: 203.0.113.0/24}
hosts:
  server: {network: internet, addr: 203.0.113.100}
control: {host: server}
nodes:
  agent: {network: internet, sandbox: {mode: pod, egress_policy: policy.yaml}}
  web: {network: internet}
`

const policy = "version: 1\ndefault: deny\n"

// A scenario that runs on policed (or any topology with agent and web).
const agentScenario = `name: agent-up
requires: [pro]
topology: ../topologies/policed.yaml
steps:
  - full_mesh: {}
`

// fakeBuiltins is a Loader over a few files, with a quickstart that is
// both a scenario and a topology as the shipped ones are.
func fakeBuiltins() *labfile.Loader {
	return &labfile.Loader{
		Scenarios: fstest.MapFS{
			"agent-up.yaml":   {Data: []byte(agentScenario)},
			"quickstart.yaml": {Data: []byte("topology: ../topologies/quickstart.yaml\nsteps:\n  - full_mesh: {}\n")},
			"bad-step.yaml":   {Data: []byte("requires: [pro]\ntopology: ../topologies/policed.yaml\nsteps:\n  - full_mesh: {}\n  - wait_path: {from: agent, to: nobody, path: direct}\n")},
		},
		Topologies: fstest.MapFS{
			"policed.yaml":    {Data: []byte(policedTopology)},
			"policy.yaml":     {Data: []byte(policy)},
			"quickstart.yaml": {Data: []byte("name: quick\nnetworks: {lan: {cidr: 10.0.0.0/24}}\nhosts: {server: {network: lan}}\ncontrol: {host: server}\nnodes: {a: {network: lan}, b: {network: lan}}\n")},
			"bad.yaml":        {Data: []byte("networks:\n  lan: {cidr: 10.0.0.0/33}\n")},
		},
	}
}

// held holds l's builtins until the test ends.
func held(t *testing.T, l *labfile.Loader) *labfile.Loader {
	t.Helper()
	release := l.Hold()
	t.Cleanup(func() { assert.NoError(t, release()) })
	return l
}

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		want labfile.Kind
	}{
		{name: "steps", data: "name: x\nsteps: []\n", want: labfile.Scenario},
		{name: "topology key", data: "topology: ../topologies/a.yaml\n", want: labfile.Scenario},
		{name: "space before colon", data: "steps  : []\n", want: labfile.Scenario},
		{name: "networks", data: "networks: {lan: {cidr: 10.0.0.0/24}}\n", want: labfile.Topology},
		{name: "nested steps are not top-level", data: "nodes:\n  steps: {network: lan}\n", want: labfile.Topology},
		{name: "a comment naming steps", data: "# steps: none\nnetworks: {}\n", want: labfile.Topology},
		{name: "empty", data: "", want: labfile.Topology},
		{name: "steps misspelt", data: "topolgy: t.yaml\nstesp:\n  - sleep: 1s\n", want: labfile.Scenario},
		{name: "topology misspelt", data: "topolgy: t.yaml\n", want: labfile.Scenario},
		{name: "topology keys near no scenario key", data: "seed: 1\nstun: {}\nhosts: {}\nnodes: {}\ndns: {}\nnetworks: {}\n", want: labfile.Topology},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, labfile.KindOf([]byte(tc.data)))
		})
	}
}

func TestResolve(t *testing.T) {
	var shipped labfile.Loader
	for _, tc := range []struct {
		name    string
		ref     string
		kind    labfile.Kind
		want    string
		wantErr string
	}{
		{name: "a scenario first", ref: "builtin:quickstart", want: "scenarios/quickstart.yaml"},
		{name: "a topology when asked for one", ref: "builtin:quickstart", kind: labfile.Topology, want: "topologies/quickstart.yaml"},
		{name: "a topology no scenario shares", ref: "builtin:cgnat", want: "topologies/cgnat.yaml"},
		{name: "with .yaml", ref: "builtin:cgnat.yaml", want: "topologies/cgnat.yaml"},
		{name: "by directory", ref: "builtin:topologies/quickstart", want: "topologies/quickstart.yaml"},
		{name: "the directory wins over kind", ref: "builtin:scenarios/quickstart", kind: labfile.Topology, want: "scenarios/quickstart.yaml"},
		{name: "misspelt", ref: "builtin:cgant", wantErr: `no built-in scenario or topology "cgant"; did you mean "cgnat"? (lattice-lab list shows them)`},
		{name: "unknown", ref: "builtin:nope", wantErr: `no built-in scenario or topology "nope" (lattice-lab list shows them)`},
		{name: "not of that kind", ref: "builtin:cgnat", kind: labfile.Scenario, wantErr: `no built-in scenario or topology "cgnat" (lattice-lab list shows them)`},
		{name: "out of the directory", ref: "builtin:../go.mod", wantErr: `no built-in scenario or topology "../go.mod" (lattice-lab list shows them)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := shipped.Resolve(tc.ref, tc.kind)
			if tc.wantErr != "" {
				assert.EqualError(t, err, tc.wantErr)
				assert.ErrorIs(t, err, labfile.ErrNoBuiltin)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestBuiltins(t *testing.T) {
	l := fakeBuiltins()
	all, err := l.Builtins("")
	require.NoError(t, err)
	assert.Equal(t, []labfile.Builtin{
		{Name: "agent-up", Kind: labfile.Scenario, Ref: "builtin:agent-up", Path: "scenarios/agent-up.yaml"},
		{Name: "bad-step", Kind: labfile.Scenario, Ref: "builtin:bad-step", Path: "scenarios/bad-step.yaml"},
		{Name: "quickstart", Kind: labfile.Scenario, Ref: "builtin:quickstart", Path: "scenarios/quickstart.yaml"},
		{Name: "bad", Kind: labfile.Topology, Ref: "builtin:bad", Path: "topologies/bad.yaml"},
		{Name: "policed", Kind: labfile.Topology, Ref: "builtin:policed", Path: "topologies/policed.yaml"},
		{Name: "policy", Kind: labfile.Topology, Ref: "builtin:policy", Path: "topologies/policy.yaml"},
		// A scenario has its name: reached by its path.
		{Name: "quickstart", Kind: labfile.Topology, Ref: "builtin:topologies/quickstart", Path: "topologies/quickstart.yaml"},
	}, all)
	topos, err := l.Builtins(labfile.Topology)
	require.NoError(t, err)
	require.Len(t, topos, 4)
	// Among topologies alone the short name is the topology.
	assert.Equal(t, "builtin:quickstart", topos[3].Ref)
	data, err := l.Read(topos[3].Ref, topos[3].Kind)
	require.NoError(t, err)
	assert.Contains(t, string(data), "name: quick\n")
}

// TestLoadBuiltinFromAnyDirectory: a shipped scenario whose inline
// topology names an egress policy loads outside the repository, is named
// by its repository path, and its policy is a file on disk until the
// hold is released.
func TestLoadBuiltinFromAnyDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("TMPDIR", t.TempDir())
	var l labfile.Loader
	release := l.Hold()
	f, err := l.Load("builtin:sandbox-pod-policy", labfile.Options{})
	require.NoError(t, err)
	assert.Equal(t, "scenarios/sandbox-pod-policy.yaml", f.Path)
	assert.Equal(t, f.Path, f.Scenario.Path)
	assert.Equal(t, labfile.Scenario, f.Kind)
	assert.Equal(t, "sandbox-pod-policy", f.Name())
	pol := nodeSandboxPolicy(t, f, "agent")
	assert.FileExists(t, pol)

	require.NoError(t, release())
	assert.NoFileExists(t, pol)
	left, err := os.ReadDir(os.Getenv("TMPDIR"))
	require.NoError(t, err)
	assert.Empty(t, left)
}

// TestLoadOn: a scenario on another topology, both builtins, from outside
// the repository: the topology's egress policy, relative to the topology,
// is checked and found in the builtins' copy.
func TestLoadOn(t *testing.T) {
	t.Chdir(t.TempDir())
	l := held(t, fakeBuiltins())
	// builtin:quickstart names the scenario, but On takes a topology.
	f, err := l.Load("builtin:agent-up", labfile.Options{On: "builtin:policed"})
	require.NoError(t, err)
	assert.Equal(t, "scenarios/agent-up.yaml", f.Path)
	assert.Equal(t, "policed", f.Plan.Name)
	assert.FileExists(t, nodeSandboxPolicy(t, f, "agent"))

	f, err = l.Load("builtin:quickstart", labfile.Options{On: "builtin:quickstart"})
	require.NoError(t, err)
	assert.Equal(t, labfile.Scenario, f.Kind)
	assert.Equal(t, "quick", f.Plan.Name)

	// A topology on disk, relative to the working directory, with its
	// policy relative to itself.
	require.NoError(t, os.MkdirAll("site", 0o755))
	require.NoError(t, os.WriteFile("site/t.yaml", []byte(policedTopology), 0o644))
	require.NoError(t, os.WriteFile("site/policy.yaml", []byte(policy), 0o644))
	f, err = l.Load("builtin:agent-up", labfile.Options{On: "site/t.yaml"})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join("site", "policy.yaml"), nodeSandboxPolicy(t, f, "agent"))

	_, err = l.Load("builtin:agent-up", labfile.Options{On: "builtin:agent-up"})
	assert.EqualError(t, err, `no built-in scenario or topology "agent-up" (lattice-lab list shows them)`)
	_, err = l.Load("builtin:policed", labfile.Options{Kind: labfile.Topology, On: "builtin:policed"})
	assert.EqualError(t, err, "labfile: load builtin:policed on topology builtin:policed: only a scenario runs on a topology")
}

// TestLoadPairs: a scenario on disk is paired with the topology it names
// relative to itself, and a topology loads as one.
func TestLoadPairs(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "topologies", "policed.yaml"), policedTopology)
	write(t, filepath.Join(dir, "topologies", "policy.yaml"), policy)
	scn := filepath.Join(dir, "scenarios", "agent-up.yaml")
	write(t, scn, agentScenario)
	var l labfile.Loader // no hold: no builtin is named

	f, err := l.Load(scn, labfile.Options{})
	require.NoError(t, err)
	assert.Equal(t, scn, f.Path)
	assert.Equal(t, labfile.Scenario, f.Kind)
	assert.Equal(t, "agent-up", f.Name())
	assert.Equal(t, "policed", f.Plan.Name)
	require.NotNil(t, f.Scenario.Topology.File)
	assert.Equal(t, filepath.Join(dir, "topologies", "policed.yaml"), f.Scenario.Topology.File.Source.File)

	f, err = l.Load(filepath.Join(dir, "topologies", "policed.yaml"), labfile.Options{})
	require.NoError(t, err)
	assert.Equal(t, labfile.Topology, f.Kind)
	assert.Nil(t, f.Scenario)
	assert.Equal(t, "policed", f.Name())
	require.NotNil(t, f.Plan)

	// Forced: a topology read as a scenario lacks what scenarios need.
	_, err = l.Load(filepath.Join(dir, "topologies", "policed.yaml"), labfile.Options{Kind: labfile.Scenario})
	var es *strictyaml.Errors
	require.ErrorAs(t, err, &es)
	assert.Equal(t, labfile.Scenario, l.GuessKind(filepath.Join(dir, "topologies", "policed.yaml"), labfile.Scenario))
	assert.Equal(t, labfile.Topology, l.GuessKind(filepath.Join(dir, "topologies", "policed.yaml"), ""))
	assert.Equal(t, labfile.Scenario, l.GuessKind("builtin:quickstart", ""))
	assert.Equal(t, labfile.Kind(""), l.GuessKind(filepath.Join(dir, "missing.yaml"), ""))
}

// TestLoadErrors: problems are reported with file:line:col, builtins by
// their repository paths (not the copy's), files on disk as given.
func TestLoadErrors(t *testing.T) {
	t.Chdir(t.TempDir())
	l := held(t, fakeBuiltins())
	write(t, "bad.yaml", "networks:\n  lan: {cidr: 10.0.0.0/33}\n")
	for _, tc := range []struct {
		name    string
		ref     string
		opt     labfile.Options
		wantErr []string
	}{
		{name: "a builtin topology", ref: "builtin:bad",
			wantErr: []string{`topologies/bad.yaml:2:15: networks.lan.cidr: want a CIDR prefix such as 192.168.1.0/24, got "10.0.0.0/33"`}},
		{name: "a builtin scenario's step", ref: "builtin:bad-step",
			wantErr: []string{`scenarios/bad-step.yaml:5:34: steps[2].wait_path.to: no node "nobody"; nodes: agent, web`}},
		{name: "a builtin scenario on a bad builtin topology", ref: "builtin:agent-up", opt: labfile.Options{On: "builtin:bad"},
			wantErr: []string{`topologies/bad.yaml:2:15: networks.lan.cidr: want a CIDR prefix such as 192.168.1.0/24, got "10.0.0.0/33"`}},
		{name: "a builtin scenario on a bad file", ref: "builtin:agent-up", opt: labfile.Options{On: "bad.yaml"},
			wantErr: []string{`bad.yaml:2:15: networks.lan.cidr: want a CIDR prefix such as 192.168.1.0/24, got "10.0.0.0/33"`}},
		{name: "a file", ref: "bad.yaml",
			wantErr: []string{`bad.yaml:2:15: networks.lan.cidr: want a CIDR prefix such as 192.168.1.0/24, got "10.0.0.0/33"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Load(tc.ref, tc.opt)
			var es *strictyaml.Errors
			require.ErrorAs(t, err, &es)
			var got []string
			for _, e := range es.List {
				got = append(got, e.Error())
			}
			assert.Equal(t, tc.wantErr, got)
		})
	}

	_, err := l.Load("missing.yaml", labfile.Options{})
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.EqualError(t, err, "open missing.yaml: no such file or directory")
}

// TestLoadMistakes: files that are wrong as a whole are refused naming the
// file and, for contents, the line and column.
func TestLoadMistakes(t *testing.T) {
	t.Chdir(t.TempDir())
	l := held(t, fakeBuiltins())
	write(t, "empty.yaml", "")
	write(t, "typos.yaml", "topolgy: t.yaml\nstesp:\n  - sleep: 1s\n")
	write(t, "tab.yaml", "topology: t.yaml\nsteps:\n\t- sleep: 1s\n")
	write(t, "dir/x.yaml", "")
	for _, tc := range []struct {
		name, ref string
		opt       labfile.Options
		wantErr   string
	}{
		{name: "empty file", ref: "empty.yaml",
			wantErr: "1 problem:\nempty.yaml:1:1: missing required key \"networks\"; networks: Network segments by name"},
		{name: "scenario keys misspelt", ref: "typos.yaml", wantErr: `4 problems:
typos.yaml:1:1: unknown key "topolgy"; did you mean "topology"? (known keys: version, name, description, topology, nodes, tags, requires, timeout, clock, steps)
typos.yaml:1:1: missing required key "topology"; topology: The topology: a path to a topology file (relative to this file), or a topology written inline
typos.yaml:1:1: missing required key "steps"; steps: The timeline, run in order
typos.yaml:2:1: unknown key "stesp"; did you mean "steps"? (known keys: version, name, description, topology, nodes, tags, requires, timeout, clock, steps)`},
		{name: "tab indentation", ref: "tab.yaml",
			wantErr: "1 problem:\ntab.yaml:3:1: yaml: found character '\\t' that cannot start any token; YAML indents with spaces, never tabs"},
		{name: "a directory", ref: "dir", wantErr: "read dir: is a directory, not a YAML file"},
		{name: "on a directory", ref: "builtin:agent-up", opt: labfile.Options{On: "dir"},
			wantErr: "1 problem:\nscenarios/agent-up.yaml:3:11: topology: read dir: is a directory, not a YAML file"},
		{name: "a misspelt builtin", ref: "builtin:agnet-up",
			wantErr: `no built-in scenario or topology "agnet-up"; did you mean "agent-up"? (lattice-lab list shows them)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Load(tc.ref, tc.opt)
			assert.EqualError(t, err, tc.wantErr)
		})
	}
}

func TestLoadBuiltinNeedsHold(t *testing.T) {
	l := fakeBuiltins()
	_, err := l.Load("builtin:policed", labfile.Options{})
	assert.EqualError(t, err, "labfile: builtin files: not held (call Loader.Hold first)")
	// Read needs none.
	_, err = l.Read("builtin:policed", "")
	assert.NoError(t, err)
	_, err = l.Read("builtin:nope", "")
	assert.True(t, errors.Is(err, labfile.ErrNoBuiltin), "%v", err)
}

// nodeSandboxPolicy is the egress policy path of node's sandbox in f's plan.
func nodeSandboxPolicy(t *testing.T, f *labfile.File, node string) string {
	t.Helper()
	for _, n := range f.Plan.Nodes {
		if n.Name == node {
			require.NotNil(t, n.Sandbox, node)
			return n.Sandbox.EgressPolicy
		}
	}
	t.Fatalf("no node %s in plan %s", node, f.Plan.Name)
	return ""
}

func write(t *testing.T, p, data string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
}
