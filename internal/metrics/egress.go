package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/latticelab/lattice/audit"
)

// EgressCounters are an egress filter's audited decisions and the audit
// log's failures: a sandbox driver's, or `lattice up`'s kernel filter's.
type EgressCounters interface {
	AuditFailures() uint64
	EgressDecisions() map[audit.Decision]uint64
}

// EgressCollector exports egress decisions and audit errors under one
// command's metric names.
type EgressCollector struct {
	c                 EgressCounters
	decisions, errors *prometheus.Desc
}

var _ prometheus.Collector = EgressCollector{}

const decisionsHelp = "Egress decisions by decision (allow, deny) and policy rule; at most 64 rules, the rest under rule=\"other\"."

var (
	descSandboxEgress      = prometheus.NewDesc("lattice_sandbox_egress_decisions_total", decisionsHelp, []string{"decision", "rule"}, nil)
	descSandboxAuditErrors = prometheus.NewDesc("lattice_sandbox_audit_write_errors_total",
		"Audit events the audit log failed to record.", nil, nil)
	descUpEgress      = prometheus.NewDesc("lattice_egress_decisions_total", decisionsHelp+" The kernel filter's, on the overlay interface.", []string{"decision", "rule"}, nil)
	descUpAuditErrors = prometheus.NewDesc("lattice_egress_audit_write_errors_total",
		"Egress decisions the audit log failed to record.", nil, nil)
)

// SandboxEgress and UpEgress are the two commands' collectors (lattice
// sandbox, lattice up).
func SandboxEgress(c EgressCounters) EgressCollector {
	return EgressCollector{c: c, decisions: descSandboxEgress, errors: descSandboxAuditErrors}
}

func UpEgress(c EgressCounters) EgressCollector {
	return EgressCollector{c: c, decisions: descUpEgress, errors: descUpAuditErrors}
}

func (e EgressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- e.decisions
	ch <- e.errors
}

func (e EgressCollector) Collect(ch chan<- prometheus.Metric) {
	for k, v := range e.c.EgressDecisions() {
		ch <- prometheus.MustNewConstMetric(e.decisions, prometheus.CounterValue, float64(v), k.Decision, k.Rule)
	}
	ch <- prometheus.MustNewConstMetric(e.errors, prometheus.CounterValue, float64(e.c.AuditFailures()))
}
