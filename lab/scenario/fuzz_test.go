package scenario

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/latticelab/lattice/internal/strictyaml"
)

// FuzzParse: any scenario either parses into steps that each have one
// action and name what exists, or fails with position errors, quickly.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		inlineWorld + "steps: [{sleep: 1s}]\n",
		inlineWorld + "steps:\n  - wait_path: {from: alice, to: bob, path: direct}\n  - transfer: {from: alice, to: bob, bytes: 1MiB}\n    background: x\n  - join: x\n",
		"topology: t.yaml\nsteps: [{ping: {from: a, to: b}}, {stop: {node: a}}, {start: {node: a}}]\n",
		"topology: t.yaml\nnodes: [a]\nsteps: [{blackhole_direct: {between: [a, b]}}, {heal_direct: {between: [b, a]}}]\n",
		"topology: t.yaml\nsteps: [{stream: {from: a, to: b, bytes: 1MiB, rate: 1Mbit, resume: true, through: [{restart: {node: b}}, {sleep: 1s}]}}]\n",
		"topology: t.yaml\nsteps: [{stop: {node: a}}, {start_refused: {node: a, error: expired}}]\n",
		"topology: t.yaml\nsteps: [{assert_metric: {node: a, metric: lattice_node_bytes_total, labels: {path: direct, direction: tx}, op: \">=\", value: 1MiB, within: 1s}}]\n",
		"topology: {networks: {}}\nsteps: []\n", "", "steps: {}",
	} {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile("../../scenarios/quickstart.yaml"); err == nil {
		f.Add(b)
	}
	topo := []byte(`networks:
  internet: {cidr: 203.0.113.0/24}
  home: {cidr: 192.168.1.0/24, uplink: internet, nat: full-cone}
control: {network: internet}
relays: {relay: {network: internet}}
nodes: {a: {network: home}, b: {network: internet}, c: {network: home, start: false}}
`)
	opt := Options{ReadFile: func(path string) ([]byte, error) {
		if path == "t.yaml" {
			return topo, nil
		}
		return nil, errors.New("no such file")
	}}
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		sc, err := Parse("s.yaml", data, opt)
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("parsing %d bytes took %v", len(data), el)
		}
		if err != nil {
			if sc != nil {
				t.Fatal("scenario and error both returned")
			}
			if !errors.Is(err, strictyaml.ErrInvalid) && !errors.Is(err, strictyaml.ErrTooLarge) {
				t.Fatalf("error wraps neither ErrInvalid nor ErrTooLarge: %v", err)
			}
			return
		}
		if sc.Plan() == nil {
			t.Fatal("a scenario without a plan")
		}
		for i := range sc.Steps {
			if name, _ := sc.Steps[i].Action(); name == "" {
				t.Fatalf("step %d has no action", i+1)
			}
		}
	})
}
