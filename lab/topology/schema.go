package topology

import "github.com/latticelab/lattice/internal/strictyaml"

// SchemaID identifies the topology format's JSON Schema.
const SchemaID = "urn:lattice:lattice-lab:topology:v1"

// Schema returns the topology format's JSON Schema (draft 2020-12), for
// editors to complete and check topology files. It is derived from the
// same types the decoder fills, so the two cannot disagree.
func Schema() map[string]any {
	return strictyaml.Schema(Topology{}, SchemaID, "lattice-lab topology",
		"A network to emulate (segments, NAT routers, hosts, link impairments) and what runs on it "+
			"(control with NATS, LRP relays, STUN servers, Lattice nodes and sandboxes). "+
			"Write lattice-lab schema topology > topology.schema.json and add "+
			"'# yaml-language-server: $schema=topology.schema.json' to the top of a file.")
}
