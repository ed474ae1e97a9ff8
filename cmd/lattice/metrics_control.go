package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/latticelab/lattice/control"
)

// controlCollector exports control's own counters (control.Stats).
type controlCollector struct{ stats func() control.Stats }

var _ prometheus.Collector = controlCollector{}

var (
	descControlRegistrations = prometheus.NewDesc("lattice_control_registrations_total",
		"Registrations by result: registered, refused (bad token or request), deregistered, challenged (answered with a challenge: the node did not know control's register key, so it registers in two requests).", []string{"result"}, nil)
	descControlSignals = prometheus.NewDesc("lattice_control_signals_total",
		"Signaling messages between peers, relayed or dropped.", []string{"result"}, nil)
	descControlBadReplies = prometheus.NewDesc("lattice_control_bad_reply_subjects_total",
		"Requests refused for a reply subject outside the requester's inbox.", nil, nil)
	descControlPeerEvents = prometheus.NewDesc("lattice_control_peer_events_total",
		"Peer events published to the nodes, by type: add, update, remove, offline, online.", []string{"type"}, nil)
)

func (controlCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descControlRegistrations
	ch <- descControlSignals
	ch <- descControlBadReplies
	ch <- descControlPeerEvents
}

func (c controlCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	ch <- prometheus.MustNewConstMetric(descControlRegistrations, prometheus.CounterValue, float64(st.Registered), "registered")
	ch <- prometheus.MustNewConstMetric(descControlRegistrations, prometheus.CounterValue, float64(st.Refused), "refused")
	ch <- prometheus.MustNewConstMetric(descControlRegistrations, prometheus.CounterValue, float64(st.Challenged), "challenged")
	ch <- prometheus.MustNewConstMetric(descControlRegistrations, prometheus.CounterValue, float64(st.Deregistered), "deregistered")
	ch <- prometheus.MustNewConstMetric(descControlSignals, prometheus.CounterValue, float64(st.SignalsRelayed), "relayed")
	ch <- prometheus.MustNewConstMetric(descControlSignals, prometheus.CounterValue, float64(st.SignalsDropped), "dropped")
	ch <- prometheus.MustNewConstMetric(descControlBadReplies, prometheus.CounterValue, float64(st.BadReplies))
	for _, t := range control.PeerEventTypes {
		ch <- prometheus.MustNewConstMetric(descControlPeerEvents, prometheus.CounterValue, float64(st.PeerEvents[t]), string(t))
	}
}
