package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/sandbox"
)

// sandboxPeers reads a sandbox's node through its status, for the node
// collector.
type sandboxPeers struct{ d sandbox.IsolationDriver }

func (s sandboxPeers) Status() []node.PeerStatus { return s.d.Status().Peers }

// node is the sandbox's node, nil before it has one.
func (s sandboxPeers) node() *node.Node {
	if d, ok := s.d.(interface{ Node() *node.Node }); ok {
		return d.Node()
	}
	return nil
}

// PathSwitches are the sandbox's node's own counts (none before it has a
// node).
func (s sandboxPeers) PathSwitches() map[node.SwitchKey]uint64 {
	if n := s.node(); n != nil {
		return n.PathSwitches()
	}
	return nil
}

// ICECounts are the sandbox's node's own counts (none before it has a
// node).
func (s sandboxPeers) ICECounts() node.ICECounts {
	if n := s.node(); n != nil {
		return n.ICECounts()
	}
	return node.ICECounts{}
}

// RelayStats is the sandbox's node's relay client's, when it has a node.
func (s sandboxPeers) RelayStats() (node.RelayStats, bool) {
	if n := s.node(); n != nil {
		return n.RelayStats()
	}
	return node.RelayStats{}, false
}

// egressCounters are an egress filter's audited decisions and the audit
// log's failures: a sandbox driver's, or `lattice up`'s kernel filter's.
type egressCounters interface {
	AuditFailures() uint64
	EgressDecisions() map[audit.Decision]uint64
}

// egressCollector exports egress decisions and audit errors under one
// command's metric names.
type egressCollector struct {
	c                 egressCounters
	decisions, errors *prometheus.Desc
}

var (
	_ prometheus.Collector = egressCollector{}
	_ egressCounters       = (*sandbox.PodDriver)(nil)
	_ egressCounters       = (*sandbox.RunscDriver)(nil)
	_ egressCounters       = (*egressRun)(nil)
)

const decisionsHelp = "Egress decisions by decision (allow, deny) and policy rule; at most 64 rules, the rest under rule=\"other\"."

var (
	descSandboxEgress      = prometheus.NewDesc("lattice_sandbox_egress_decisions_total", decisionsHelp, []string{"decision", "rule"}, nil)
	descSandboxAuditErrors = prometheus.NewDesc("lattice_sandbox_audit_write_errors_total",
		"Audit events the audit log failed to record.", nil, nil)
	descUpEgress      = prometheus.NewDesc("lattice_egress_decisions_total", decisionsHelp+" The kernel filter's, on the overlay interface.", []string{"decision", "rule"}, nil)
	descUpAuditErrors = prometheus.NewDesc("lattice_egress_audit_write_errors_total",
		"Egress decisions the audit log failed to record.", nil, nil)
)

// sandboxEgress and upEgress are the two commands' collectors.
func sandboxEgress(c egressCounters) egressCollector {
	return egressCollector{c: c, decisions: descSandboxEgress, errors: descSandboxAuditErrors}
}

func upEgress(c egressCounters) egressCollector {
	return egressCollector{c: c, decisions: descUpEgress, errors: descUpAuditErrors}
}

func (e egressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- e.decisions
	ch <- e.errors
}

func (e egressCollector) Collect(ch chan<- prometheus.Metric) {
	for k, v := range e.c.EgressDecisions() {
		ch <- prometheus.MustNewConstMetric(e.decisions, prometheus.CounterValue, float64(v), k.Decision, k.Rule)
	}
	ch <- prometheus.MustNewConstMetric(e.errors, prometheus.CounterValue, float64(e.c.AuditFailures()))
}

// sandboxCollectors are the collectors for a running sandbox's /metrics.
func sandboxCollectors(d sandbox.IsolationDriver, m *metricsFlags) []prometheus.Collector {
	cs := []prometheus.Collector{newNodeCollector(sandboxPeers{d}, m.perPeer, m.peerLimit)}
	if c, ok := d.(egressCounters); ok {
		cs = append(cs, sandboxEgress(c))
	}
	return cs
}
