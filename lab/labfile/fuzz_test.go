package labfile_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/labfile"
)

const fuzzTopology = "networks: {lan: {cidr: 10.0.0.0/24}}\nhosts: {server: {network: lan}}\ncontrol: {host: server}\nnodes: {a: {network: lan}, b: {network: lan}}\n"

// FuzzLoad loads arbitrary file contents the way lattice-lab loads a
// path it is given, guessing the kind, forcing one, or running a scenario
// on another topology: no panic; a problem in the file is a
// *strictyaml.Errors whose entries name a file; a loaded file has the
// kind asked for or guessed, the path it was loaded from, a name and a
// plan; loading with a guessed kind is loading as that kind.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{
		agentScenario, policedTopology, fuzzTopology,
		"topology: t.yaml\nsteps:\n  - full_mesh: {}\n",
		"name: inline\ntopology: {networks: {lan: {cidr: 10.0.0.0/24}}, hosts: {s: {network: lan}}, control: {host: s}, nodes: {a: {network: lan}}}\nsteps: [{sleep: 1s}]\n",
		"topology: missing.yaml\nsteps: []\n",
		"steps: {}", "networks:\n  lan: {cidr: 10.0.0.0/33}\n", "",
	} {
		for kind := range byte(4) {
			f.Add([]byte(s), kind)
		}
	}
	if b, err := os.ReadFile("../../scenarios/quickstart.yaml"); err == nil {
		f.Add(b, byte(0))
	}
	var l labfile.Loader
	f.Fuzz(func(t *testing.T, data []byte, kind byte) {
		// A scenario reads the topology it names; keep those reads in the
		// temporary directory's reach, away from devices that block.
		for _, dev := range []string{"/dev", "/proc", "/sys"} {
			if bytes.Contains(data, []byte(dev)) {
				return
			}
		}
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "t.yaml"), []byte(fuzzTopology), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(policy), 0o600))
		p := filepath.Join(dir, "lab.yaml")
		require.NoError(t, os.WriteFile(p, data, 0o600))

		var opt labfile.Options
		want := labfile.KindOf(data)
		switch kind % 4 {
		case 1:
			opt.Kind, want = labfile.Topology, labfile.Topology
		case 2:
			opt.Kind, want = labfile.Scenario, labfile.Scenario
		case 3:
			opt.On, want = filepath.Join(dir, "t.yaml"), labfile.Scenario
		}
		file, err := l.Load(p, opt)
		if kind%4 == 0 {
			// Guessing is loading as the kind KindOf names.
			forced, ferr := l.Load(p, labfile.Options{Kind: want})
			require.Equal(t, fmt.Sprint(ferr), fmt.Sprint(err), "guessed %s", want)
			require.Equal(t, forced == nil, file == nil)
		}
		if err != nil {
			require.Nil(t, file, "a file and an error")
			var es *strictyaml.Errors
			if errors.As(err, &es) {
				require.NotEmpty(t, es.List, "no problems listed: %v", err)
				for _, e := range es.List {
					require.NotEmpty(t, e.File, "problem without a file: %v", e)
				}
				return
			}
			require.ErrorIs(t, err, strictyaml.ErrTooLarge, "neither position errors nor too large: %v", err)
			return
		}
		require.Equal(t, want, file.Kind)
		require.Equal(t, p, file.Path)
		require.NotNil(t, file.Plan)
		require.NotEmpty(t, file.Name())
		if want == labfile.Scenario {
			require.NotNil(t, file.Scenario)
			require.Equal(t, p, file.Scenario.Path)
			require.Same(t, file.Scenario.Plan(), file.Plan)
		} else {
			require.NotNil(t, file.Topology)
		}
	})
}
