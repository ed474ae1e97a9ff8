// Package report holds what a lattice-lab run found, as plain data, and
// writes it as JSON, JUnit XML (for CI) and a self-contained HTML page
// (the NAT-pair matrix, the timeline of path switches with their reasons,
// links to the pcapng captures).
package report

import "time"

// Status is a scenario's or step's outcome.
type Status string

// Outcomes.
const (
	Passed  Status = "passed"
	Failed  Status = "failed"
	Skipped Status = "skipped"
)

// Result is one scenario run (or one topology's reachability check).
type Result struct {
	Scenario    string        `json:"scenario"`
	File        string        `json:"file,omitempty"`
	Description string        `json:"description,omitempty"`
	Topology    string        `json:"topology"`
	Tags        []string      `json:"tags,omitempty"`
	Edition     string        `json:"edition"`
	Started     time.Time     `json:"started"`
	Duration    time.Duration `json:"duration_ns"`
	Status      Status        `json:"status"`
	// Error is why it failed; SkipReason why it was skipped.
	Error      string      `json:"error,omitempty"`
	SkipReason string      `json:"skip_reason,omitempty"`
	Steps      []Step      `json:"steps,omitempty"`
	Nodes      []Node      `json:"nodes,omitempty"`
	Pairs      []Pair      `json:"pairs,omitempty"`
	Events     []PathEvent `json:"events,omitempty"`
	Captures   []string    `json:"captures,omitempty"`
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
