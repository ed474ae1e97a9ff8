package audit

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Decision is one label pair of the egress decision counts: the decision
// ("allow" or "deny") and the rule that made it.
type Decision struct{ Decision, Rule string }

// MaxCountedRules bounds the distinct rules Decisions counts; decisions by
// rules beyond it count under RuleOther. A policy's rules are few, but
// reloads can bring new ones for as long as the process runs, and each
// rule is a metrics series.
const MaxCountedRules = 64

// RuleOther is the rule decisions count under once MaxCountedRules
// distinct rules have been seen.
const RuleOther = "other"

// Decisions counts "egress" events by decision and rule. The zero value
// is ready to use; it is safe for concurrent use.
type Decisions struct {
	mu sync.Mutex // guards m
	m  map[Decision]uint64
}

// Observe counts ev if it is an egress decision.
func (c *Decisions) Observe(ev Event) {
	if ev.Kind != "egress" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[Decision]uint64{}
	}
	k := Decision{Decision: ev.Decision, Rule: ev.Rule}
	if _, ok := c.m[k]; !ok && len(c.m) >= MaxCountedRules {
		k.Rule = RuleOther
	}
	c.m[k]++
}

// Counts returns a copy of the counts so far (nil before the first).
func (c *Decisions) Counts() map[Decision]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}

// Counter is a Sink that counts the egress decisions passing through it
// to another Sink, and the events that Sink failed to record: what a
// process's /metrics says of its audit log.
type Counter struct {
	next      Sink
	decisions Decisions
	failures  atomic.Uint64
}

// NewCounter returns a Counter writing to next (Discard if nil).
func NewCounter(next Sink) *Counter {
	if next == nil {
		next = Discard
	}
	return &Counter{next: next}
}

// Write counts ev, then writes it to the next Sink. A decision counts even
// when its write fails: it was made.
func (c *Counter) Write(ev Event) error {
	c.decisions.Observe(ev)
	err := c.next.Write(ev)
	if err != nil {
		c.failures.Add(1)
	}
	return err
}

// Decisions returns the egress decisions counted so far.
func (c *Counter) Decisions() map[Decision]uint64 { return c.decisions.Counts() }

// Failures returns how many events the next Sink failed to record.
func (c *Counter) Failures() uint64 { return c.failures.Load() }
