package runner

import (
	"os"
	"runtime/debug"
	"sync"
)

// hugeLabGCPercent is the Go collector's growth target (GOGC) while a lab
// of largeLab nodes or more is up. A Go process's peak memory follows the
// heap its collector lets grow between cycles, live heap × (1 + GOGC/100):
// at the default 100, scale-1000's 4.4 GB of live heap peaked at 7.2–7.5
// GiB resident. At 50 the 300-node cut of it peaked 0.80–0.84× as high,
// with its pings as fast, and scale.yaml's 100 nodes, every pair pinged
// (about 600 MB live, most of it WireGuard's 9,900 active peers), under
// 1 GiB rather than 1.2–1.3 (docs/PERFORMANCE.md). The process's own
// GOGC, if set, wins.
const hugeLabGCPercent = 50

// holdsGC reports whether the lab holds the collector at
// hugeLabGCPercent while it is up.
func (l *Lab) holdsGC() bool { return len(l.plan.Nodes) >= largeLab }

// gcHold is the one growth target the huge labs of a process share: the
// first sets it, the last to close puts back what was there.
var gcHold struct {
	mu   sync.Mutex
	held int
	prev int
}

// holdGC lowers the collector's growth target to hugeLabGCPercent, unless
// GOGC is set in the environment or the target is lower already. It
// reports whether it did; release (idempotent) undoes it once no other
// hold remains.
func holdGC() (release func(), held bool) {
	if os.Getenv("GOGC") != "" {
		return func() {}, false
	}
	gcHold.mu.Lock()
	defer gcHold.mu.Unlock()
	if gcHold.held == 0 {
		prev := debug.SetGCPercent(hugeLabGCPercent)
		if prev >= 0 && prev <= hugeLabGCPercent {
			debug.SetGCPercent(prev) // lower already: leave it
			return func() {}, false
		}
		gcHold.prev = prev
	}
	gcHold.held++
	var once sync.Once
	return func() {
		once.Do(func() {
			gcHold.mu.Lock()
			defer gcHold.mu.Unlock()
			if gcHold.held--; gcHold.held == 0 {
				debug.SetGCPercent(gcHold.prev)
			}
		})
	}, true
}
