//go:build race

package node_test

// raceEnabled: the race detector slows the lab and WireGuard several times
// over, so heavy end-to-end tests scale their sizes and timeouts by it.
const raceEnabled = true
