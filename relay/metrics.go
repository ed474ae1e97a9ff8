package relay

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The server counts with plain atomics on its hot paths and exports them
// through a prometheus.Collector, so counting costs the same whether or not
// anything is registered, and Stats reads the same numbers Prometheus sees.

// dropReason says why the server dropped a packet; the names are the
// "reason" label values of lattice_relay_drops_total.
type dropReason int

const (
	dropNoPeer      dropReason = iota // destination not connected
	dropQueueFull                     // destination's queue full
	dropRateLimited                   // sender over its packet rate
	dropUnknownID                     // datagram names a peer id never bound
	dropMalformed                     // datagram does not parse
	numDropReasons
)

var dropNames = [numDropReasons]string{"no_peer", "queue_full", "rate_limited", "unknown_id", "malformed"}

// authReason says why the server refused a connection; the names are the
// "reason" label values of lattice_relay_auth_failures_total.
type authReason int

const (
	authMalformed  authReason = iota // HELLO or token does not parse
	authInvalid                      // token MAC mismatch (forged, or another secret)
	authExpired                      // token expired
	authWrongKey                     // token for another key than the one presented
	authVersion                      // unsupported protocol version
	authTimeout                      // no valid HELLO in time, or the TLS handshake failed
	authFull                         // MaxClients reached
	authBusy                         // evicted: MaxPending connections authenticating
	authBusySource                   // evicted: MaxPendingPerSource from its source authenticating
	authAbandoned                    // the client closed before its HELLO (a race's loser, a client that gave up)
	authShutdown                     // the relay closed while the connection authenticated
	authALPN                         // the TLS client did not offer ALPN lrp/1
	numAuthReasons
)

var authNames = [numAuthReasons]string{"malformed", "invalid", "expired", "wrong_key", "version", "timeout", "server_full", "busy", "busy_source", "abandoned", "shutdown", "alpn"}

const (
	transportQUIC = "quic"
	transportTCP  = "tcp"
)

type metrics struct {
	clients        [2]atomic.Int64 // by transport index: 0 quic, 1 tcp
	connections    [2]atomic.Uint64
	authFailures   [numAuthReasons]atomic.Uint64
	drops          [numDropReasons]atomic.Uint64
	packetsIn      atomic.Uint64
	bytesIn        atomic.Uint64
	packetsOut     atomic.Uint64
	bytesOut       atomic.Uint64
	datagramsIn    atomic.Uint64
	datagramsOut   atomic.Uint64
	peerGone       atomic.Uint64
	fallbacks      atomic.Uint64
	protocolErrors atomic.Uint64
}

func transportIndex(t string) int {
	if t == transportTCP {
		return 1
	}
	return 0
}

func (m *metrics) drop(r dropReason)     { m.drops[r].Add(1) }
func (m *metrics) authFail(r authReason) { m.authFailures[r].Add(1) }
func (m *metrics) clientUp(t string) {
	m.clients[transportIndex(t)].Add(1)
	m.connections[transportIndex(t)].Add(1)
}
func (m *metrics) clientDown(t string)   { m.clients[transportIndex(t)].Add(-1) }
func (m *metrics) received(n int)        { m.packetsIn.Add(1); m.bytesIn.Add(uint64(n)) }
func (m *metrics) fallback()             { m.fallbacks.Add(1) }
func (m *metrics) protocolError()        { m.protocolErrors.Add(1) }
func (m *metrics) transports() [2]string { return [2]string{transportQUIC, transportTCP} }
func (m *metrics) peerGoneSent()         { m.peerGone.Add(1) }
func (m *metrics) authFailed() [numAuthReasons]uint64 {
	var out [numAuthReasons]uint64
	for i := range out {
		out[i] = m.authFailures[i].Load()
	}
	return out
}

// Stats is a snapshot of a Server's counters. The maps are keyed by the
// label values of the matching Prometheus metric (docs/LRP.md).
type Stats struct {
	Clients      map[string]int    // connected clients by transport ("quic", "tcp")
	Connections  map[string]uint64 // authenticated connections ever, by transport
	AuthFailures map[string]uint64 // refused connections by reason
	Drops        map[string]uint64 // dropped packets by reason
	PacketsIn    uint64            // packets received from clients
	BytesIn      uint64
	PacketsOut   uint64 // packets delivered to clients
	BytesOut     uint64
	// DatagramsIn and DatagramsOut count the packets among PacketsIn and
	// PacketsOut that travelled as QUIC datagrams rather than frames.
	DatagramsIn  uint64
	DatagramsOut uint64
	PeerGone     uint64 // PEER_GONE notifications sent
	// DatagramFallbacks counts packets sent on a QUIC stream because they
	// did not fit a datagram.
	DatagramFallbacks uint64
	// ProtocolErrors counts connections closed for breaking the wire format.
	ProtocolErrors uint64
}

func (m *metrics) sent(n int, datagram bool) {
	m.packetsOut.Add(1)
	m.bytesOut.Add(uint64(n))
	if datagram {
		m.datagramsOut.Add(1)
	}
}

func (m *metrics) snapshot() Stats {
	st := Stats{
		Clients:           map[string]int{},
		Connections:       map[string]uint64{},
		AuthFailures:      map[string]uint64{},
		Drops:             map[string]uint64{},
		PacketsIn:         m.packetsIn.Load(),
		BytesIn:           m.bytesIn.Load(),
		PacketsOut:        m.packetsOut.Load(),
		BytesOut:          m.bytesOut.Load(),
		DatagramsIn:       m.datagramsIn.Load(),
		DatagramsOut:      m.datagramsOut.Load(),
		PeerGone:          m.peerGone.Load(),
		DatagramFallbacks: m.fallbacks.Load(),
		ProtocolErrors:    m.protocolErrors.Load(),
	}
	for i, t := range m.transports() {
		st.Clients[t] = int(m.clients[i].Load())
		st.Connections[t] = m.connections[i].Load()
	}
	for i, v := range m.authFailed() {
		st.AuthFailures[authNames[i]] = v
	}
	for i := range m.drops {
		st.Drops[dropNames[i]] = m.drops[i].Load()
	}
	return st
}

var (
	descClients = prometheus.NewDesc("lattice_relay_clients",
		"Clients connected to the relay, by transport.", []string{"transport"}, nil)
	descConnections = prometheus.NewDesc("lattice_relay_connections_total",
		"Authenticated client connections, by transport.", []string{"transport"}, nil)
	descAuthFailures = prometheus.NewDesc("lattice_relay_auth_failures_total",
		"Connections refused before or at authentication, by reason.", []string{"reason"}, nil)
	descPackets = prometheus.NewDesc("lattice_relay_packets_total",
		"Packets received from clients (in) and delivered to clients (out).", []string{"direction"}, nil)
	descBytes = prometheus.NewDesc("lattice_relay_bytes_total",
		"Packet payload bytes received from clients (in) and delivered to clients (out).", []string{"direction"}, nil)
	descDrops = prometheus.NewDesc("lattice_relay_drops_total",
		"Packets the relay dropped, by reason.", []string{"reason"}, nil)
	descDatagrams = prometheus.NewDesc("lattice_relay_datagrams_total",
		"Packets, among lattice_relay_packets_total, that travelled as QUIC datagrams.", []string{"direction"}, nil)
	descPeerGone = prometheus.NewDesc("lattice_relay_peer_gone_total",
		"PEER_GONE notifications sent to clients.", nil, nil)
	descFallbacks = prometheus.NewDesc("lattice_relay_datagram_fallbacks_total",
		"Packets sent on a QUIC stream because they did not fit a datagram.", nil, nil)
	descProtocolErrors = prometheus.NewDesc("lattice_relay_protocol_errors_total",
		"Connections closed because the client broke the wire format.", nil, nil)
)

// collector exports a server's metrics.
type collector struct{ m *metrics }

var _ prometheus.Collector = collector{}

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClients, descConnections, descAuthFailures, descPackets, descBytes, descDatagrams, descDrops, descPeerGone, descFallbacks, descProtocolErrors} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	for i, t := range m.transports() {
		ch <- prometheus.MustNewConstMetric(descClients, prometheus.GaugeValue, float64(m.clients[i].Load()), t)
		ch <- prometheus.MustNewConstMetric(descConnections, prometheus.CounterValue, float64(m.connections[i].Load()), t)
	}
	for i, v := range m.authFailed() {
		ch <- prometheus.MustNewConstMetric(descAuthFailures, prometheus.CounterValue, float64(v), authNames[i])
	}
	for i := range m.drops {
		ch <- prometheus.MustNewConstMetric(descDrops, prometheus.CounterValue, float64(m.drops[i].Load()), dropNames[i])
	}
	ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(m.packetsIn.Load()), "in")
	ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(m.packetsOut.Load()), "out")
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(m.bytesIn.Load()), "in")
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(m.bytesOut.Load()), "out")
	ch <- prometheus.MustNewConstMetric(descDatagrams, prometheus.CounterValue, float64(m.datagramsIn.Load()), "in")
	ch <- prometheus.MustNewConstMetric(descDatagrams, prometheus.CounterValue, float64(m.datagramsOut.Load()), "out")
	ch <- prometheus.MustNewConstMetric(descPeerGone, prometheus.CounterValue, float64(m.peerGone.Load()))
	ch <- prometheus.MustNewConstMetric(descFallbacks, prometheus.CounterValue, float64(m.fallbacks.Load()))
	ch <- prometheus.MustNewConstMetric(descProtocolErrors, prometheus.CounterValue, float64(m.protocolErrors.Load()))
}
