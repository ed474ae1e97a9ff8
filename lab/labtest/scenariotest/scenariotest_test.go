package scenariotest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/runner"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/vtime"
)

func TestMain(m *testing.M) {
	runner.MaybeRunChild()
	goleak.VerifyTestMain(m)
}

// TestQuickstartVirtual runs the quickstart in virtual time: it passes,
// records its clock, and costs a fraction of its network time in wall
// time.
func TestQuickstartVirtual(t *testing.T) {
	if ok, why := vtime.Available(); !ok {
		t.Skip(why)
	}
	f, err := scenario.Load("../../../scenarios/quickstart.yaml")
	require.NoError(t, err)
	res := Run(t, f, Options{Clock: "virtual", Options: runner.Options{StateDir: t.TempDir(), Progress: func(s string) { t.Log(s) }}})
	require.Equal(t, report.Passed, res.Status, res.Error)
	assert.Equal(t, report.ClockVirtual, res.Clock)
	t.Logf("quickstart: %v of network time in %v of wall time: x_realtime %.1f", res.Duration, res.Wall, res.XRealtime())
	if !race {
		assert.Greater(t, res.XRealtime(), 2.0, "network time over wall time")
	}
}

// TestClockBadInput: virtual time asked for a scenario with a kernel host
// is an error naming the host; auto runs it on the wall clock.
func TestClockBadInput(t *testing.T) {
	f, err := scenario.Load("../../../scenarios/netns-host.yaml")
	require.NoError(t, err)
	_, err = Clock(f, "virtual")
	require.Error(t, err)
	assert.Equal(t, "scenario netns-host: virtual time cannot run it: host box is a kernel host (kind netns: the kernel's TCP/IP behind a TUN device)", err.Error())
	c, err := Clock(f, "auto")
	require.NoError(t, err)
	assert.Equal(t, report.ClockReal, c.Clock)
}
