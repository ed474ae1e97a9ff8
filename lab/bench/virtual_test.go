package bench

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/nats-io/nats-server/v2/server/ats"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/labfile"
	"github.com/latticelab/lattice/lab/topology"
	"github.com/latticelab/lattice/lab/vtime"
)

// quickstart loads the built-in quickstart topology, the bench's pair,
// for a test in virtual time; it skips the test when this build cannot
// run gVisor stacks on virtual time (scripts/vtime-flags.sh).
func quickstart(t *testing.T) *topology.Plan {
	t.Helper()
	if ok, why := vtime.Available(); !ok {
		t.Skip(why)
	}
	var l labfile.Loader
	release := l.Hold()
	t.Cleanup(func() { require.NoError(t, release()) })
	f, err := l.Load("builtin:quickstart", labfile.Options{Kind: labfile.Topology})
	require.NoError(t, err)
	return f.Plan
}

// inVirtualTime runs fn in a synctest bubble, where time is network time
// alone, watched by a vtime watchdog, with NATS's clock registered for it;
// ctx ends when fn returns.
func inVirtualTime(t *testing.T, fn func(t *testing.T, ctx context.Context)) {
	t.Helper()
	ats.Register()
	defer ats.Unregister()
	dog := vtime.Watch(vtime.WatchdogConfig{Name: t.Name()})
	synctest.Test(t, func(t *testing.T) {
		defer dog.Pulse()()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		fn(t, ctx)
	})
	require.NoError(t, dog.Stop())
}
