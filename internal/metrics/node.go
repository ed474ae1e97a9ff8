package metrics

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/node"
)

// NodeCollector exports a node's paths from its status snapshot, the one
// `lattice status` shows, at scrape time: the node counts nothing extra
// for it. Series are per path, not per peer, so 1000 peers cost the same
// dozen series as two; per-peer series are opt-in and capped
// (docs/METRICS.md). It lives here, not in cmd/lattice, so the lab
// scrapes the very collector `lattice up` serves.
//
// Path switches and ICE attempts are the node's own counts
// (node.Node.PathSwitches, ICECounts) when the source has them; otherwise
// they are read from each peer's history and last ICE report, so they are
// sampled: a peer that switches more than the history holds (32 events)
// between scrapes, or an ICE attempt that starts and ends between two
// scrapes, is undercounted.
type NodeCollector struct {
	src       StatusSource
	perPeer   bool
	peerLimit int
	now       func() time.Time

	mu    sync.Mutex // guards the following fields
	peers map[key.Public]*peerSeen
	// retired holds the byte counts of peers gone from the status, so the
	// per-path totals never go down.
	retired  [numPaths][2]uint64
	switches map[[2]string]uint64 // {to, reason}
	attempts uint64
	outcomes map[string]uint64
}

// StatusSource is what the collector reads: a node, or a sandbox's node.
type StatusSource interface {
	Status() []node.PeerStatus
}

// muxSource is optionally implemented by a StatusSource (*node.Node).
type muxSource interface {
	MuxStats() node.MuxStats
}

// switchSource is optionally implemented by a StatusSource (*node.Node):
// every path switch, counted as it happens.
type switchSource interface {
	PathSwitches() map[node.SwitchKey]uint64
}

// iceSource is optionally implemented by a StatusSource (*node.Node):
// every ICE attempt and outcome, counted as it happens.
type iceSource interface {
	ICECounts() node.ICECounts
}

// relaySource is optionally implemented by a StatusSource (*node.Node):
// the node's relay client's counters, false when it has none.
type relaySource interface {
	RelayStats() (node.RelayStats, bool)
}

// DefaultPeerLimit is --metrics-peer-limit's default.
const DefaultPeerLimit = 100

// peerSeen is what the collector remembers of a peer between scrapes.
type peerSeen struct {
	bytes      [numPaths][2]uint64
	lastSwitch time.Time
	session    uint64
	outcome    bool // the current session's outcome is counted
}

const (
	pathDirect = iota
	pathRelay
	numPaths
)

var (
	pathNames = [numPaths]string{string(node.PathDirect), string(node.PathRelay)}
	dirNames  = [2]string{"tx", "rx"}
)

var (
	descNodePeers = nodeDesc("lattice_node_peers",
		"Peers by current path (direct, relay, offline).", []string{"path"}, nil)
	descNodeBytes = nodeDesc("lattice_node_bytes_total",
		"WireGuard bytes sent (tx) and received (rx) on each path, summed over peers.", []string{"path", "direction"}, nil)
	descNodeSwitches = nodeDesc("lattice_node_path_switches_total",
		"Path switches by new path and reason (counted by the node; sampled from peers' history where it cannot count).", []string{"to", "reason"}, nil)
	descNodeHandshake = nodeDesc("lattice_node_handshake_age_seconds",
		"Age of each online peer's last WireGuard handshake, as a histogram over peers.", nil, nil)
	descNodeNoHandshake = nodeDesc("lattice_node_peers_without_handshake",
		"Online peers with no completed WireGuard handshake.", nil, nil)
	descNodeICEAttempts = nodeDesc("lattice_node_ice_attempts_total",
		"ICE attempts (sessions) the node started (sampled from peers' status at each scrape where it cannot count).", nil, nil)
	descNodeICEOutcomes = nodeDesc("lattice_node_ice_outcomes_total",
		"ICE attempts that ended connected or failed (sampled from peers' status at each scrape where it cannot count).", []string{"outcome"}, nil)
	descNodeICEState = nodeDesc("lattice_node_ice_state",
		"Peers by the state of their last ICE attempt.", []string{"state"}, nil)
	descNodeMux = nodeDesc("lattice_node_socket_datagrams_total",
		"Datagrams received on the shared UDP socket, by kind.", []string{"kind"}, nil)
	descNodeMuxDrops = nodeDesc("lattice_node_socket_drops_total",
		"Datagrams dropped on the shared UDP socket because their queue was full, by kind.", []string{"kind"}, nil)
	descNodeRelayConnects = nodeDesc("lattice_node_relay_connects_total",
		"Connections to the relay, the first and every reconnect.", nil, nil)
	descNodeRelayDrops = nodeDesc("lattice_node_relay_recv_drops_total",
		"Packets from the relay dropped because the node fell behind.", nil, nil)
	descNodeRelayConnected = nodeDesc("lattice_node_relay_connected",
		"1 while the relay client is connected, by transport (quic, tcp); 0 under transport=\"none\" while it is not.", []string{"transport"}, nil)
	descNodeRelayRenewals = nodeDesc("lattice_node_relay_token_renewals_total",
		"Relay token renewals by result (ok, failed).", []string{"result"}, nil)
	descPeerBytes = nodeDesc("lattice_node_peer_bytes_total",
		"Per peer (--metrics-per-peer): bytes by path and direction.", []string{"peer", "path", "direction"}, nil)
	descPeerPath = nodeDesc("lattice_node_peer_path",
		"Per peer (--metrics-per-peer): 1 for the peer's current path.", []string{"peer", "path"}, nil)
	descPeerHandshake = nodeDesc("lattice_node_peer_handshake_age_seconds",
		"Per peer (--metrics-per-peer): age of the last WireGuard handshake.", []string{"peer"}, nil)
	descPeerRTT = nodeDesc("lattice_node_peer_rtt_seconds",
		"Per peer (--metrics-per-peer): the direct path's round trip as ICE measures it.", []string{"peer"}, nil)
	descPeerOmitted = nodeDesc("lattice_node_peer_series_omitted",
		"Peers left out of the per-peer series by --metrics-peer-limit.", nil, nil)
)

// handshakeBuckets bracket WireGuard's timers: a rekey every 120s, a
// session rejected after 180s without one.
var handshakeBuckets = []float64{5, 30, 60, 120, 180, 300, 900, 3600}

var _ prometheus.Collector = (*NodeCollector)(nil)

// nodeLabels is every node metric's name and variable labels, as
// nodeDesc records them.
var nodeLabels = map[string][]string{}

func nodeDesc(name, help string, labels []string, constLabels prometheus.Labels) *prometheus.Desc {
	nodeLabels[name] = labels
	return prometheus.NewDesc(name, help, labels, constLabels)
}

// NodeMetrics returns the name of every metric NodeCollector can export
// and its labels, for a checker of metric names (the lab's assert_metric).
func NodeMetrics() map[string][]string {
	out := make(map[string][]string, len(nodeLabels))
	for k, v := range nodeLabels {
		out[k] = slices.Clone(v)
	}
	return out
}

// NewNodeCollector reads src at every scrape; with perPeer, the first
// peerLimit peers also get series of their own. The lab gathers the same
// collector in process (lab/runner's assert_metric step).
func NewNodeCollector(src StatusSource, perPeer bool, peerLimit int) *NodeCollector {
	return &NodeCollector{
		src: src, perPeer: perPeer, peerLimit: peerLimit, now: time.Now,
		peers: map[key.Public]*peerSeen{}, switches: map[[2]string]uint64{}, outcomes: map[string]uint64{},
	}
}

func (c *NodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNodePeers, descNodeBytes, descNodeSwitches, descNodeHandshake,
		descNodeNoHandshake, descNodeICEAttempts, descNodeICEOutcomes, descNodeICEState, descNodeMux, descNodeMuxDrops,
		descNodeRelayConnects, descNodeRelayConnected, descNodeRelayDrops, descNodeRelayRenewals,
		descPeerBytes, descPeerPath, descPeerHandshake, descPeerRTT, descPeerOmitted} {
		ch <- d
	}
}

func (c *NodeCollector) Collect(ch chan<- prometheus.Metric) {
	sts := c.src.Status()
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.observeLocked(sts)
	paths := map[string]float64{string(node.PathDirect): 0, string(node.PathRelay): 0, string(node.PathOffline): 0}
	iceStates := map[string]float64{}
	var ages []float64
	noHandshake := 0
	bytes := c.retired
	for _, st := range sts {
		paths[string(st.Path)]++
		for p := range numPaths {
			for d := range 2 {
				bytes[p][d] += peerBytes(st)[p][d]
			}
		}
		if !st.Online {
			continue
		}
		if st.ICE.State != "" {
			iceStates[iceState(st.ICE)]++
		}
		if st.LastHandshake.IsZero() {
			noHandshake++
		} else {
			ages = append(ages, now.Sub(st.LastHandshake).Seconds())
		}
	}
	for p, v := range paths {
		ch <- prometheus.MustNewConstMetric(descNodePeers, prometheus.GaugeValue, v, p)
	}
	for p := range numPaths {
		for d := range 2 {
			ch <- prometheus.MustNewConstMetric(descNodeBytes, prometheus.CounterValue, float64(bytes[p][d]), pathNames[p], dirNames[d])
		}
	}
	if ss, ok := c.src.(switchSource); ok {
		for k, v := range ss.PathSwitches() {
			ch <- prometheus.MustNewConstMetric(descNodeSwitches, prometheus.CounterValue, float64(v), string(k.To), k.Reason)
		}
	} else {
		for k, v := range c.switches {
			ch <- prometheus.MustNewConstMetric(descNodeSwitches, prometheus.CounterValue, float64(v), k[0], k[1])
		}
	}
	ch <- handshakeHistogram(ages)
	ch <- prometheus.MustNewConstMetric(descNodeNoHandshake, prometheus.GaugeValue, float64(noHandshake))
	attempts, outcomes := c.attempts, map[string]uint64{"connected": c.outcomes["connected"], "failed": c.outcomes["failed"]}
	if is, ok := c.src.(iceSource); ok {
		n := is.ICECounts()
		attempts, outcomes = n.Attempts, map[string]uint64{"connected": n.Connected, "failed": n.Failed}
	}
	ch <- prometheus.MustNewConstMetric(descNodeICEAttempts, prometheus.CounterValue, float64(attempts))
	for _, o := range []string{"connected", "failed"} {
		ch <- prometheus.MustNewConstMetric(descNodeICEOutcomes, prometheus.CounterValue, float64(outcomes[o]), o)
	}
	for s, v := range iceStates {
		ch <- prometheus.MustNewConstMetric(descNodeICEState, prometheus.GaugeValue, v, s)
	}
	if m, ok := c.src.(muxSource); ok {
		ms := m.MuxStats()
		for kind, v := range map[string]uint64{"stun": ms.STUN, "wireguard": ms.WireGuard, "other": ms.Other} {
			ch <- prometheus.MustNewConstMetric(descNodeMux, prometheus.CounterValue, float64(v), kind)
		}
		ch <- prometheus.MustNewConstMetric(descNodeMuxDrops, prometheus.CounterValue, float64(ms.STUNDropped), "stun")
		ch <- prometheus.MustNewConstMetric(descNodeMuxDrops, prometheus.CounterValue, float64(ms.WireGuardDropped), "wireguard")
	}
	if rs, ok := c.relayStats(); ok {
		connected, transport := 1.0, rs.Transport
		if transport == "" {
			connected, transport = 0, "none"
		}
		ch <- prometheus.MustNewConstMetric(descNodeRelayConnected, prometheus.GaugeValue, connected, transport)
		ch <- prometheus.MustNewConstMetric(descNodeRelayConnects, prometheus.CounterValue, float64(rs.Connects))
		ch <- prometheus.MustNewConstMetric(descNodeRelayDrops, prometheus.CounterValue, float64(rs.RecvDropped))
		ch <- prometheus.MustNewConstMetric(descNodeRelayRenewals, prometheus.CounterValue, float64(rs.TokenRenewals), "ok")
		ch <- prometheus.MustNewConstMetric(descNodeRelayRenewals, prometheus.CounterValue, float64(rs.TokenRenewalFailures), "failed")
	}
	if c.perPeer {
		c.collectPeers(ch, sts, now)
	}
}

func (c *NodeCollector) relayStats() (node.RelayStats, bool) {
	if r, ok := c.src.(relaySource); ok {
		return r.RelayStats()
	}
	return node.RelayStats{}, false
}

// collectPeers exports the first peerLimit peers (by name: Status sorts
// them) with their own series.
func (c *NodeCollector) collectPeers(ch chan<- prometheus.Metric, sts []node.PeerStatus, now time.Time) {
	omitted := max(0, len(sts)-c.peerLimit)
	ch <- prometheus.MustNewConstMetric(descPeerOmitted, prometheus.GaugeValue, float64(omitted))
	for _, st := range sts[:len(sts)-omitted] {
		name := st.Peer.Name
		b := peerBytes(st)
		for p := range numPaths {
			for d := range 2 {
				ch <- prometheus.MustNewConstMetric(descPeerBytes, prometheus.CounterValue, float64(b[p][d]), name, pathNames[p], dirNames[d])
			}
		}
		ch <- prometheus.MustNewConstMetric(descPeerPath, prometheus.GaugeValue, 1, name, string(st.Path))
		if !st.LastHandshake.IsZero() {
			ch <- prometheus.MustNewConstMetric(descPeerHandshake, prometheus.GaugeValue, now.Sub(st.LastHandshake).Seconds(), name)
		}
		if st.RTT > 0 {
			ch <- prometheus.MustNewConstMetric(descPeerRTT, prometheus.GaugeValue, st.RTT.Seconds(), name)
		}
	}
}

// observeLocked folds a snapshot into the sampled counters: new history
// events, new ICE sessions and their outcomes, peers gone.
func (c *NodeCollector) observeLocked(sts []node.PeerStatus) {
	seen := make(map[key.Public]bool, len(sts))
	for _, st := range sts {
		k := st.Peer.PublicKey
		seen[k] = true
		ps := c.peers[k]
		if ps == nil {
			ps = &peerSeen{}
			c.peers[k] = ps
		}
		ps.bytes = peerBytes(st)
		for _, ev := range st.History {
			if ev.Time.After(ps.lastSwitch) {
				c.switches[[2]string{string(ev.To), SwitchReason(ev)}]++
				ps.lastSwitch = ev.Time
			}
		}
		if s := st.ICE.Session; s != 0 && s != ps.session {
			c.attempts++
			ps.session, ps.outcome = s, false
		}
		if st.ICE.Session != 0 && !ps.outcome {
			switch iceState(st.ICE) {
			case "connected", "completed":
				c.outcomes["connected"]++
				ps.outcome = true
			case "failed":
				c.outcomes["failed"]++
				ps.outcome = true
			}
		}
	}
	for k, ps := range c.peers {
		if !seen[k] {
			for p := range numPaths {
				for d := range 2 {
					c.retired[p][d] += ps.bytes[p][d]
				}
			}
			delete(c.peers, k)
		}
	}
}

// iceState is the report's state as a label: pion names its states
// "Checking", "Connected", …, the node its own "new" and "idle".
func iceState(r node.ICEReport) string { return strings.ToLower(r.State) }

func peerBytes(st node.PeerStatus) [numPaths][2]uint64 {
	return [numPaths][2]uint64{{st.TxDirect, st.RxDirect}, {st.TxRelay, st.RxRelay}}
}

// SwitchReason maps a PathEvent's free-text reason to a bounded label
// (node.SwitchReason).
func SwitchReason(ev node.PathEvent) string { return node.SwitchReason(ev) }

func handshakeHistogram(ages []float64) prometheus.Metric {
	buckets := make(map[float64]uint64, len(handshakeBuckets))
	var sum float64
	for _, a := range ages {
		sum += a
		for _, b := range handshakeBuckets {
			if a <= b {
				buckets[b]++
			}
		}
	}
	return prometheus.MustNewConstHistogram(descNodeHandshake, uint64(len(ages)), sum, buckets)
}
