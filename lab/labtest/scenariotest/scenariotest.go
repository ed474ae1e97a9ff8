// Package scenariotest runs lattice-lab scenarios from Go tests, in
// virtual time where the scenario and the build allow it: the whole
// in-process lab (fabric, routers, links, NAT, gVisor hosts, control with
// embedded NATS, relays, STUN, nodes, pod sandboxes) then runs in one
// testing/synctest bubble, where time moves only when everything waits, so
// an hour of timers costs what its packets cost to compute. Only a test can
// run a bubble (synctest.Test wants a *testing.T), which is why this is a
// test helper and lattice-lab run stays on the wall clock.
package scenariotest

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats-server/v2/server/ats"

	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/runner"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/vtime"
)

// Options tune Run.
type Options struct {
	runner.Options
	// Clock is virtual, real or auto (see runner.ResolveClock). If empty,
	// auto.
	Clock string
	// Watchdog is how much wall time a virtual run's clock may stand still
	// before the run counts as stopped by something outside the bubble.
	// If zero, 60s.
	Watchdog time.Duration
	// OnStop receives the watchdog's error, outside the bubble. If nil,
	// the watchdog panics with it: a stopped bubble can be woken only by
	// what it waits on, so ending the test binary loudly is the
	// alternative to a hang until -timeout.
	OnStop func(error)
}

// Clock is the clock Run would run f on, and why it is not virtual when
// it cannot be.
func Clock(f *scenario.File, want string) (runner.ClockChoice, error) {
	return runner.ResolveClock(f, want, true, "")
}

// Run runs scenario f and returns its result. On the virtual clock it
// runs in a synctest bubble of t, with everything the run uses made
// inside it (context, timers, certificates on the bubble's clock,
// goroutines), under a wall-clock vtime.Watchdog; the result's Started and
// Wall are then the wall clock's, and every other duration is network
// time. A clock that cannot be had (virtual asked for a scenario with a
// kernel host, or in a build without the shim) fails the test.
func Run(t *testing.T, f *scenario.File, opt Options) *report.Result {
	t.Helper()
	choice, err := Clock(f, opt.Clock)
	if err != nil {
		t.Fatal(err)
	}
	if choice.Clock == report.ClockReal {
		if choice.Note != "" {
			t.Log("real time: " + choice.Note)
		}
		return runner.RunScenario(t.Context(), f, opt.Options)
	}
	return runVirtual(t, f, opt)
}

func runVirtual(t *testing.T, f *scenario.File, opt Options) *report.Result {
	// nats-server's access-time service selects on a channel its init
	// made, outside any bubble; a JetStream store that starts it inside
	// one would stop the clock. Registered here first, the service runs
	// outside, and stores inside only count themselves.
	ats.Register()
	defer ats.Unregister()
	timeout := f.Timeout
	if timeout == 0 {
		timeout = runner.DefaultTimeout
	}
	dog := vtime.Watch(vtime.WatchdogConfig{Name: t.Name(), Timeout: opt.Watchdog,
		Horizon: 2*timeout + time.Minute, OnStop: opt.OnStop})
	o := opt.Options
	o.Clock = report.ClockVirtual
	var res *report.Result
	wall := time.Now()
	synctest.Test(t, func(t *testing.T) {
		stop := dog.Pulse()
		defer stop()
		// A context of the test's would carry a Done channel from outside
		// the bubble.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res = runner.RunScenario(ctx, f, o)
	})
	if err := dog.Stop(); err != nil {
		t.Error(err)
	}
	res.Started, res.Wall = wall, time.Since(wall)
	return res
}
