package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/sandbox"
)

// sandboxPeers reads a sandbox's node through its status, for the node
// collector.
type sandboxPeers struct{ d sandbox.IsolationDriver }

func (s sandboxPeers) Status() []node.PeerStatus { return s.d.Status().Peers }

// RelayStats is the sandbox's node's relay client's, when it has a node.
func (s sandboxPeers) RelayStats() (node.RelayStats, bool) {
	if d, ok := s.d.(interface{ Node() *node.Node }); ok {
		if n := d.Node(); n != nil {
			return n.RelayStats()
		}
	}
	return node.RelayStats{}, false
}

// sandboxCounters is what the drivers count beyond their node's status.
type sandboxCounters interface {
	AuditFailures() uint64
	EgressDecisions() map[sandbox.EgressDecision]uint64
}

// sandboxCollector exports a sandbox's egress decisions and audit errors.
type sandboxCollector struct{ c sandboxCounters }

var (
	_ prometheus.Collector = sandboxCollector{}
	_ sandboxCounters      = (*sandbox.PodDriver)(nil)
	_ sandboxCounters      = (*sandbox.RunscDriver)(nil)
)

var (
	descSandboxEgress = prometheus.NewDesc("lattice_sandbox_egress_decisions_total",
		"Egress decisions by decision (allow, deny) and policy rule; at most 64 rules, the rest under rule=\"other\".", []string{"decision", "rule"}, nil)
	descSandboxAuditErrors = prometheus.NewDesc("lattice_sandbox_audit_write_errors_total",
		"Audit events the audit log failed to record.", nil, nil)
)

func (sandboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSandboxEgress
	ch <- descSandboxAuditErrors
}

func (s sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	for k, v := range s.c.EgressDecisions() {
		ch <- prometheus.MustNewConstMetric(descSandboxEgress, prometheus.CounterValue, float64(v), k.Decision, k.Rule)
	}
	ch <- prometheus.MustNewConstMetric(descSandboxAuditErrors, prometheus.CounterValue, float64(s.c.AuditFailures()))
}

// sandboxCollectors are the collectors for a running sandbox's /metrics.
func sandboxCollectors(d sandbox.IsolationDriver, m *metricsFlags) []prometheus.Collector {
	cs := []prometheus.Collector{newNodeCollector(sandboxPeers{d}, m.perPeer, m.peerLimit)}
	if c, ok := d.(sandboxCounters); ok {
		cs = append(cs, sandboxCollector{c})
	}
	return cs
}
