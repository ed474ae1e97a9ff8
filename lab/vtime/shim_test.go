package vtime

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/sleep"
	"gvisor.dev/gvisor/pkg/syncevent"
)

// watchdogAfter is how long, in wall time, a probe may wait for a bubble
// that should advance at once.
const watchdogAfter = 10 * time.Second

func TestStateOf(t *testing.T) {
	dump := []byte("goroutine 1 [running]:\nmain.main()\n\n" +
		"goroutine 7 [select (durable), 2 minutes]:\ngvisor.dev/gvisor/pkg/sleep.(*Sleeper).nextWaker(...)\n" +
		"github.com/latticelab/lattice/lab/vtime.parkInSleeper(0x1)\n\n" +
		"goroutine 9 [select, synctest bubble 3]:\nexample.wait()\n")
	tests := []struct {
		name, fn  string
		wantState string
		wantFound bool
	}{
		{name: "durable with duration", fn: probeFunc, wantState: "select (durable)", wantFound: true},
		{name: "plain in a bubble", fn: "example.wait(", wantState: "select", wantFound: true},
		{name: "running", fn: "main.main(", wantState: "running", wantFound: true},
		{name: "absent", fn: "nowhere(", wantFound: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state, found := stateOf(dump, tt.fn)
			assert.Equal(t, tt.wantFound, found)
			assert.Equal(t, tt.wantState, state)
		})
	}
}

// TestAvailable checks what Available says against the build: without the
// overlay it names the way to get it; with it, the durable reason.
func TestAvailable(t *testing.T) {
	ok, why := Available()
	if !patched() {
		assert.False(t, ok)
		assert.Contains(t, why, "scripts/vtime-flags.sh")
		return
	}
	assert.True(t, ok, why)
	assert.Contains(t, why, durableSelect)
}

// TestSleeperDurable parks a goroutine in each of gVisor's two parking
// primitives inside a bubble and checks that the bubble counts it as
// durably blocked: synctest.Wait returns and the clock jumps an hour. If
// gVisor or Go stop agreeing, the parked goroutine is not durable, Wait never
// returns on its own, and a wall-clock watchdog started outside the bubble
// wakes it, so the test fails instead of hanging.
func TestSleeperDurable(t *testing.T) {
	needShim(t)
	tests := []struct {
		name string
		park func() (wait, wake func())
	}{
		{name: "sleep.Sleeper", park: func() (func(), func()) {
			s, w := new(sleep.Sleeper), new(sleep.Waker)
			s.AddWaker(w)
			return func() { s.Fetch(true); s.Done() }, w.Assert
		}},
		{name: "syncevent.Waiter", park: func() (func(), func()) {
			w := new(syncevent.Waiter)
			w.Init()
			return func() { w.WaitAndAckAll() }, func() { w.Notify(1) }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wait, wake := tt.park()
			var rescued atomic.Bool
			dog := time.AfterFunc(watchdogAfter, func() { rescued.Store(true); wake() })
			defer dog.Stop()
			synctest.Test(t, func(t *testing.T) {
				done := make(chan struct{})
				go func() { defer close(done); wait() }()
				synctest.Wait()
				require.False(t, rescued.Load(), "%s did not park durably: the bubble's clock froze until a watchdog woke it after %v of wall time", tt.name, watchdogAfter)
				start := time.Now()
				time.Sleep(time.Hour)
				assert.Equal(t, time.Hour, time.Since(start))
				wake()
				<-done
			})
		})
	}
}
