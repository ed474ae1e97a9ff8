package runner

import (
	"fmt"
	"strings"

	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/vtime"
)

// Clock choices for Options.Clock and lattice-lab run --clock.
const (
	// ClockAuto runs on the clock the scenario names, or, when it names
	// none, virtually where the scenario and the build allow it.
	ClockAuto = "auto"
)

// ClockChoice is which clock a scenario will run on, and why.
type ClockChoice struct {
	Clock report.Clock
	// Note says why, when the clock is not the one asked for or the one
	// the scenario would prefer (virtual time unavailable in this build);
	// empty otherwise.
	Note string
}

// ResolveClock picks the clock for scenario f. want is "", "auto",
// "virtual" or "real"; anything but auto overrides the scenario's clock:
// key. virtualOK says whether the caller can run a testing/synctest bubble
// at all (a go test can; a plain binary cannot) and why not.
//
// Auto (and a scenario's clock: virtual) falls back to real time, with a
// note, where the build lacks the virtual-time shim or the caller cannot
// run a bubble; an explicit want of virtual is then an error. Virtual time
// for a scenario that needs the wall clock (WallClockNeeds) is an error
// naming the host when asked for explicitly, and real time when auto.
func ResolveClock(f *scenario.File, want string, virtualOK bool, whyNot string) (ClockChoice, error) {
	explicit := true // asked for by the caller, not the file
	switch want {
	case "", ClockAuto:
		want, explicit = f.Clock, false
	case scenario.ClockVirtual, scenario.ClockReal:
	default:
		return ClockChoice{}, fmt.Errorf("clock %q: want virtual, real or auto", want)
	}
	needs := f.WallClockNeeds()
	switch want {
	case scenario.ClockReal:
		return ClockChoice{Clock: report.ClockReal}, nil
	case scenario.ClockVirtual:
		if len(needs) > 0 {
			// Parse rejects clock: virtual in the file; this is the caller's.
			return ClockChoice{}, fmt.Errorf("scenario %s: virtual time cannot run it: %s", f.Name, strings.Join(needs, "; "))
		}
	default: // auto, the file names no clock
		if len(needs) > 0 {
			return ClockChoice{Clock: report.ClockReal}, nil
		}
	}
	if !virtualOK {
		if explicit {
			return ClockChoice{}, fmt.Errorf("scenario %s: virtual time: %s", f.Name, whyNot)
		}
		return ClockChoice{Clock: report.ClockReal, Note: whyNot}, nil
	}
	if ok, why := vtime.Available(); !ok {
		if explicit {
			return ClockChoice{}, fmt.Errorf("scenario %s: virtual time is unavailable in this build: %s", f.Name, why)
		}
		return ClockChoice{Clock: report.ClockReal, Note: why}, nil
	}
	return ClockChoice{Clock: report.ClockVirtual}, nil
}
