//go:build race

package scenarios_test

// The race detector makes the mesh about ten times slower; the
// scenarios' time limits stretch to match.
const slowdown = 4
