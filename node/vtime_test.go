package node_test

import (
	"testing"
	"testing/synctest"

	"github.com/nats-io/nats-server/v2/server/ats"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/vtime"
)

// inVirtualTime runs f in a synctest bubble, where the lab, WireGuard, ICE
// and NATS all read the bubble's clock, under a vtime watchdog started
// outside it. A build without the shim (a bare go test) cannot run gVisor
// stacks in a bubble, so the test skips with vtime's reason.
func inVirtualTime(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if ok, why := vtime.Available(); !ok {
		t.Skip(why)
	}
	// nats-server's access-time service selects on a channel made in its
	// init, outside any bubble: registered here, it runs outside, and the
	// embedded server's stores inside only count themselves.
	ats.Register()
	defer ats.Unregister()
	dog := vtime.Watch(vtime.WatchdogConfig{Name: t.Name()})
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(dog.Pulse()) // registered first, so it runs last
		f(t)
	})
	require.NoError(t, dog.Stop())
}

// byClock checks one behaviour on the clock that can check it exactly:
// virtual, in a bubble, when the build has the vtime shim (make test passes
// scripts/vtime-flags.sh); otherwise the virtual subtest skips with vtime's
// reason and realTime, the wall-clock check with its -race allowances,
// runs instead.
func byClock(t *testing.T, virtual, realTime func(t *testing.T)) {
	t.Helper()
	ok, _ := vtime.Available()
	t.Run("virtual", func(t *testing.T) { inVirtualTime(t, virtual) })
	if !ok {
		t.Run("realtime", realTime)
	}
}
