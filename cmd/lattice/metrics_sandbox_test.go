package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/latticelab/lattice/internal/metrics"
	"github.com/latticelab/lattice/sandbox"
)

type fakeSandboxCounters struct{}

func (fakeSandboxCounters) AuditFailures() uint64 { return 2 }
func (fakeSandboxCounters) EgressDecisions() map[sandbox.EgressDecision]uint64 {
	return map[sandbox.EgressDecision]uint64{{Decision: "allow", Rule: "web"}: 5, {Decision: "deny", Rule: "default"}: 3}
}

// TestEgressCollectors: a sandbox's and `lattice up`'s egress decisions
// and audit errors, each under its command's names.
func TestEgressCollectors(t *testing.T) {
	c := metrics.SandboxEgress(fakeSandboxCounters{})
	assert.Equal(t, 5.0, counterValue(t, c, "lattice_sandbox_egress_decisions_total", map[string]string{"decision": "allow", "rule": "web"}))
	assert.Equal(t, 3.0, counterValue(t, c, "lattice_sandbox_egress_decisions_total", map[string]string{"decision": "deny", "rule": "default"}))
	assert.Equal(t, 2.0, counterValue(t, c, "lattice_sandbox_audit_write_errors_total", nil))
	assert.Equal(t, 3, countSeries(c))
	u := metrics.UpEgress(fakeSandboxCounters{})
	assert.Equal(t, 5.0, counterValue(t, u, "lattice_egress_decisions_total", map[string]string{"decision": "allow", "rule": "web"}))
	assert.Equal(t, 2.0, counterValue(t, u, "lattice_egress_audit_write_errors_total", nil))
	assert.Equal(t, 3, countSeries(u))
}
