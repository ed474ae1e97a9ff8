package fabric

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/vtime"
)

// byClock checks one behaviour on the clock that can check it exactly. In a
// build with the virtual-time shim (scripts/vtime-flags.sh, which make test
// passes) it runs virtual in a synctest bubble, where timing bounds are
// exact. Without the shim gVisor's stacks would freeze a bubble, so the
// virtual subtest skips with vtime's reason and realTime, the wall-clock
// check with its tolerances, runs instead.
func byClock(t *testing.T, virtual, realTime func(t *testing.T)) {
	t.Helper()
	ok, _ := vtime.Available()
	t.Run("virtual", func(t *testing.T) { inBubble(t, virtual) })
	if !ok {
		t.Run("realtime", realTime)
	}
}

// inBubble runs f in a synctest bubble under a vtime watchdog started
// outside it, so a bubble whose clock stops fails loudly, naming what it
// waits on, instead of hanging until -timeout. The fabric f builds (with
// newWorld) is closed by f's cleanups, inside the bubble. Without the
// virtual-time shim a host's gVisor stack freezes the bubble, so f is
// skipped with vtime's reason (a plain `go test`; make test has the shim).
func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if ok, why := vtime.Available(); !ok {
		t.Skip(why)
	}
	dog := vtime.Watch(vtime.WatchdogConfig{Name: t.Name()})
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(dog.Pulse()) // registered first, so it runs last
		f(t)
	})
	require.NoError(t, dog.Stop())
}
