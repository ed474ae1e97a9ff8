package runner

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/scenario"
)

// TestRequiresVirtualSkipsOnTheWallClock: a scenario of hours of network
// time is skipped, saying how to get virtual time, rather than run for
// hours on the wall clock.
func TestRequiresVirtualSkipsOnTheWallClock(t *testing.T) {
	f, err := scenario.Parse("long.yaml", []byte(`requires: [virtual]
timeout: 3h
topology:
  networks: {internet: {cidr: 203.0.113.0/24}}
  control: {network: internet}
  nodes: {a: {network: internet}, b: {network: internet}}
steps:
  - sleep: 2h
  - ping: {from: a, to: b}
`), scenario.Options{})
	require.NoError(t, err)
	res := RunScenario(t.Context(), f, Options{StateDir: t.TempDir()})
	assert.Equal(t, report.Skipped, res.Status)
	assert.Equal(t, NeedsVirtual, res.SkipReason)
	assert.Empty(t, res.Steps, "nothing ran")
}
