package scenario

import (
	"fmt"
	"slices"
)

// The clocks a scenario can ask for.
const (
	// ClockVirtual is a testing/synctest bubble's clock.
	ClockVirtual = "virtual"
	// ClockReal is the wall clock.
	ClockReal = "real"
)

// RequiresVirtual in a scenario's requires says it runs only on the
// virtual clock: its hours of network time would take hours of wall time,
// so on the wall clock it is skipped.
const RequiresVirtual = "virtual"

// WallClockNeeds lists what in the scenario's topology needs the wall
// clock, one phrase per host or sandbox, naming it: kernel hosts wait on
// real file descriptors (their TUN device) and gvisor sandboxes on runsc,
// and a goroutine waiting outside a bubble stops the bubble's clock. Empty
// when the whole scenario can run in virtual time.
func (f *File) WallClockNeeds() []string {
	plan := f.Plan()
	if plan == nil {
		return nil
	}
	var out []string
	gvisorHost := map[string]bool{}
	for _, n := range plan.Nodes {
		if n.Sandbox != nil && n.Sandbox.Mode == "gvisor" {
			gvisorHost[n.Host] = true
			out = append(out, fmt.Sprintf("node %s is a gvisor sandbox (runsc in a network namespace, host %s)", n.Name, n.Host))
		}
	}
	for _, h := range plan.Hosts {
		if h.Kind == "netns" && !gvisorHost[h.Config.Name] {
			out = append(out, fmt.Sprintf("host %s is a kernel host (kind netns: the kernel's TCP/IP behind a TUN device)", h.Config.Name))
		}
	}
	return out
}

// checkClock reports clock: virtual or requires: [virtual] on a scenario
// that needs the wall clock, once per host or sandbox that does, and
// requires: [virtual] with clock: real.
func (k *checker) checkClock() {
	virtualOnly := slices.Contains(k.f.Requires, RequiresVirtual)
	if k.f.Clock == ClockReal && virtualOnly {
		k.errorf("clock", "leave clock out, or write clock: virtual",
			"clock: real contradicts requires: [%s]", RequiresVirtual)
		return
	}
	path, hint := "clock", "write clock: real, or leave clock out to run on the wall clock where needed"
	switch {
	case k.f.Clock == ClockVirtual:
	case virtualOnly:
		path, hint = "requires", "drop virtual from requires: the scenario needs the wall clock"
	default:
		return
	}
	for _, need := range k.f.WallClockNeeds() {
		k.errorf(path, hint, "virtual time cannot run this scenario: %s, which waits on the wall clock outside the bubble", need)
	}
}
