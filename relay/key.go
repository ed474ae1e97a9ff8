package relay

import "github.com/latticelab/lattice/key"

// Key is a node's WireGuard public key, by which the relay forwards.
//
// Transitional; removed once node/ uses key.Public.
type Key = key.Public
