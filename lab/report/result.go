// Package report holds what a lattice-lab run found, as plain data, and
// writes it as JSON, JUnit XML (for CI) and a self-contained HTML page
// (the NAT-pair matrix, the timeline of path switches with their reasons,
// links to the pcapng captures).
package report

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// Status is a scenario's or step's outcome.
type Status string

// Outcomes.
const (
	Passed  Status = "passed"
	Failed  Status = "failed"
	Skipped Status = "skipped"
)

// Clock is the clock a scenario ran on.
type Clock string

// Clocks.
const (
	// ClockVirtual is a testing/synctest bubble's clock: it advances only
	// when everything in the lab waits, so timings repeat run after run.
	ClockVirtual Clock = "virtual"
	// ClockReal is the wall clock.
	ClockReal Clock = "real"
)

// Result is one scenario run (or one topology's reachability check).
//
// Two identical runs on the virtual clock give identical Results except
// for the wall-clock fields, Started and Wall (and x_realtime, derived from
// Wall, in JSON); Deterministic clears them. Every other duration (the
// scenario's, the steps', the pairs' and events') is on Clock. On the real
// clock nothing timed repeats exactly.
//
// In JSON, besides its fields, a Result carries network_seconds
// (Duration), wall_seconds (Wall) and x_realtime (XRealtime).
type Result struct {
	Scenario    string    `json:"scenario"`
	File        string    `json:"file,omitempty"`
	Description string    `json:"description,omitempty"`
	Topology    string    `json:"topology"`
	Tags        []string  `json:"tags,omitempty"`
	Edition     string    `json:"edition"`
	Started     time.Time `json:"started"` // wall clock, even when Clock is virtual
	// Clock is what Duration and every other duration here are measured
	// on; empty in results from before clocks were recorded.
	Clock Clock `json:"clock"`
	// Duration is how long the scenario took on Clock: network time.
	Duration time.Duration `json:"duration_ns"`
	// Wall is how long it took on the wall clock; zero if not measured.
	// It is written to JSON as wall_seconds.
	Wall   time.Duration `json:"-"`
	Status Status        `json:"status"`
	// Error is why it failed; SkipReason why it was skipped.
	Error      string      `json:"error,omitempty"`
	SkipReason string      `json:"skip_reason,omitempty"`
	Steps      []Step      `json:"steps,omitempty"`
	Nodes      []Node      `json:"nodes,omitempty"`
	Pairs      []Pair      `json:"pairs,omitempty"`
	Events     []PathEvent `json:"events,omitempty"`
	Captures   []string    `json:"captures,omitempty"`
	// Traffic is the sampled nodes' bytes per path over time (traffic.go).
	Traffic []NodeTraffic `json:"traffic,omitempty"`
}

// Step is one timeline step's outcome.
type Step struct {
	Index    int           `json:"index"` // from 1
	Action   string        `json:"action"`
	Label    string        `json:"label"`
	Status   Status        `json:"status"`
	Started  time.Duration `json:"started_ns"` // since the scenario started
	Duration time.Duration `json:"duration_ns"`
	Error    string        `json:"error,omitempty"`
	Detail   string        `json:"detail,omitempty"`
	Metrics  []Metric      `json:"metrics,omitempty"`
}

// Metric is a measurement a step made.
type Metric struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// Node is a node of the run's topology.
type Node struct {
	Name    string `json:"name"`
	Network string `json:"network"`
	// NAT describes what stands between it and the internet:
	// "port-restricted-cone", "full-cone behind cgnat", "none".
	NAT     string `json:"nat"`
	Sandbox string `json:"sandbox,omitempty"`
}

// Pair is what one node saw of a peer at the end of the run.
type Pair struct {
	From    string `json:"from"`
	To      string `json:"to"`
	FromNAT string `json:"from_nat"`
	ToNAT   string `json:"to_nat"`
	Path    string `json:"path"` // direct, relay, or none (no handshake)
	// TimeToDirect is from both nodes being up to the first direct path;
	// zero if the pair never went direct.
	TimeToDirect time.Duration `json:"time_to_direct_ns,omitempty"`
	RelayBytes   uint64        `json:"relay_bytes"`
	DirectBytes  uint64        `json:"direct_bytes"`
	// ICE is why the last direct attempt failed, if it did.
	ICE string `json:"ice_error,omitempty"`
	// Why says, in the node's words, why a relayed pair is relayed
	// (node.PeerStatus.Why).
	Why string `json:"why,omitempty"`
}

// PathEvent is a path switch a node recorded, with its reason.
type PathEvent struct {
	At     time.Duration `json:"at_ns"` // since the scenario started
	Node   string        `json:"node"`
	Peer   string        `json:"peer"`
	To     string        `json:"to"`
	Addr   string        `json:"addr,omitempty"`
	Reason string        `json:"reason"`
}

// Metric returns the value of the first metric named name, over the
// result's steps.
func (r *Result) Metric(name string) (float64, bool) {
	for _, s := range r.Steps {
		for _, m := range s.Metrics {
			if m.Name == name {
				return m.Value, true
			}
		}
	}
	return 0, false
}

// XRealtime is network time over wall time: how many times faster than
// real time the scenario ran (about 1 on the real clock). Zero if Wall was
// not measured.
func (r *Result) XRealtime() float64 {
	if r.Wall <= 0 {
		return 0
	}
	return r.Duration.Seconds() / r.Wall.Seconds()
}

// Deterministic returns a deep copy of r with the fields that differ
// between identical runs (Started, Wall) cleared, for comparing runs.
func (r *Result) Deterministic() *Result {
	c := *r
	c.Started, c.Wall = time.Time{}, 0
	c.Tags = slices.Clone(r.Tags)
	c.Steps = slices.Clone(r.Steps)
	for i := range c.Steps {
		c.Steps[i].Metrics = slices.Clone(c.Steps[i].Metrics)
	}
	c.Nodes = slices.Clone(r.Nodes)
	c.Pairs = slices.Clone(r.Pairs)
	c.Events = slices.Clone(r.Events)
	c.Captures = slices.Clone(r.Captures)
	c.Traffic = slices.Clone(r.Traffic)
	for i := range c.Traffic {
		c.Traffic[i].Samples = slices.Clone(c.Traffic[i].Samples)
	}
	return &c
}

// resultFields is Result without its JSON methods.
type resultFields Result

// resultJSON is a Result as JSON has it: its fields, then the timing in
// seconds.
type resultJSON struct {
	*resultFields
	NetworkSeconds float64 `json:"network_seconds"`
	WallSeconds    float64 `json:"wall_seconds"`
	XRealtime      float64 `json:"x_realtime"`
}

// MarshalJSON writes r's fields and network_seconds, wall_seconds and
// x_realtime.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(resultJSON{resultFields: (*resultFields)(&r), NetworkSeconds: r.Duration.Seconds(),
		WallSeconds: r.Wall.Seconds(), XRealtime: r.XRealtime()})
}

// UnmarshalJSON reads what MarshalJSON writes; Wall comes from
// wall_seconds, network_seconds and x_realtime are derived and ignored.
func (r *Result) UnmarshalJSON(b []byte) error {
	v := resultJSON{resultFields: (*resultFields)(r)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	// Bound the nanoseconds, not the seconds: the largest seconds below
	// MaxInt64/1e9 still round up to 2^63 ns, which overflows Duration.
	ns := math.Round(v.WallSeconds * 1e9)
	if v.WallSeconds < 0 || ns >= math.MaxInt64 {
		return fmt.Errorf("result %q: wall_seconds %v out of range", r.Scenario, v.WallSeconds)
	}
	r.Wall = time.Duration(ns)
	return nil
}
