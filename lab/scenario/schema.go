package scenario

import "github.com/latticelab/lattice/internal/strictyaml"

// SchemaID identifies the scenario format's JSON Schema.
const SchemaID = "urn:lattice:lattice-lab:scenario:v1"

// Schema returns the scenario format's JSON Schema (draft 2020-12); an
// inline topology is checked against the topology format's definitions.
func Schema() map[string]any {
	return strictyaml.Schema(Scenario{}, SchemaID, "lattice-lab scenario",
		"A topology and a timeline of steps run against it by lattice-lab run and go test ./scenarios/...")
}
