package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/meshtest"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/relay"
)

// counterValue reads one series of a collector.
func counterValue(t *testing.T, c prometheus.Collector, name string, labels map[string]string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

// countSeries counts c's series, only those named names if given.
func countSeries(c prometheus.Collector, names ...string) int {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for m := range ch {
		if len(names) == 0 || strings.Contains(m.Desc().String(), `"`+names[0]+`"`) {
			n++
		}
	}
	return n
}

// TestNodeMetricsCountTransfer: N bytes fetched over the overlay show up,
// at least N, on the path they took, on the sender's tx and the
// receiver's rx, and not on the other path; the peer gauge and the
// path-switch counter agree.
func TestNodeMetricsCountTransfer(t *testing.T) {
	const n = 256 << 10
	for _, tc := range []struct {
		path      node.PathKind
		other     string
		relayOnly bool
	}{
		{path: node.PathRelay, other: "direct", relayOnly: true},
		{path: node.PathDirect, other: "relay"},
	} {
		t.Run(string(tc.path), func(t *testing.T) {
			w := meshtest.Start(t)
			edit := func(c *node.Config) {
				c.ICE.RelayOnly = tc.relayOnly
				c.ICE.Candidates = func(a netip.Addr) bool { return a.IsLoopback() }
			}
			a, b := w.Peer(t, "a", edit), w.Peer(t, "b", edit)
			payload := bytes.Repeat([]byte("x"), n)
			a.ServeHTTP(t, 80, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write(payload) }))
			meshtest.WaitPath(t, b.Node, "a", tc.path, 20*time.Second)
			meshtest.WaitPath(t, a.Node, "b", tc.path, 20*time.Second)
			ca, cb := newNodeCollector(a.Node, false, 0), newNodeCollector(b.Node, false, 0)
			before := counterValue(t, ca, "lattice_node_bytes_total", map[string]string{"path": string(tc.path), "direction": "tx"})

			hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return b.Stack.Dial(ctx, network, addr)
			}}}
			t.Cleanup(hc.CloseIdleConnections)
			resp, err := hc.Get(fmt.Sprintf("http://%s/", a.Addr()))
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Len(t, got, n)

			tx := counterValue(t, ca, "lattice_node_bytes_total", map[string]string{"path": string(tc.path), "direction": "tx"})
			rx := counterValue(t, cb, "lattice_node_bytes_total", map[string]string{"path": string(tc.path), "direction": "rx"})
			assert.GreaterOrEqual(t, tx-before, float64(n), "sender's %s tx", tc.path)
			assert.GreaterOrEqual(t, rx, float64(n), "receiver's %s rx", tc.path)
			assert.Less(t, counterValue(t, cb, "lattice_node_bytes_total", map[string]string{"path": tc.other, "direction": "rx"}), float64(n/4),
				"the bulk did not travel on %s", tc.other)
			assert.Equal(t, 1.0, counterValue(t, cb, "lattice_node_peers", map[string]string{"path": string(tc.path)}))
			assert.GreaterOrEqual(t, counterValue(t, cb, "lattice_node_path_switches_total", map[string]string{"to": string(tc.path)}), 1.0)
			if tc.path == node.PathDirect {
				assert.GreaterOrEqual(t, counterValue(t, cb, "lattice_node_ice_attempts_total", nil), 1.0)
				assert.GreaterOrEqual(t, counterValue(t, cb, "lattice_node_ice_outcomes_total", map[string]string{"outcome": "connected"}), 1.0)
				assert.Zero(t, counterValue(t, cb, "lattice_node_ice_outcomes_total", map[string]string{"outcome": "failed"}))
			}
			// Both nodes connected to the relay once, over TCP (the
			// default transport), and are connected still.
			for _, c := range []prometheus.Collector{ca, cb} {
				assert.Equal(t, 1.0, counterValue(t, c, "lattice_node_relay_connects_total", nil))
				assert.Equal(t, 1.0, counterValue(t, c, "lattice_node_relay_connected", map[string]string{"transport": "tcp"}))
			}
		})
	}
}

// fakeStatus is a statusSource whose snapshot a test sets.
type fakeStatus struct{ sts []node.PeerStatus }

func (f *fakeStatus) Status() []node.PeerStatus { return f.sts }

func fakePeer(i int, path node.PathKind, tx uint64) node.PeerStatus {
	var k key.Public
	k[0], k[1] = byte(i), byte(i>>8)
	st := node.PeerStatus{Peer: controlapi.Peer{Name: fmt.Sprintf("peer-%04d", i), PublicKey: k}, Online: true, Path: path}
	if path == node.PathDirect {
		st.TxDirect = tx
	} else {
		st.TxRelay = tx
	}
	return st
}

// TestNodeMetricsCardinality: 1000 peers give the same per-path series as
// two; --metrics-per-peer adds series for at most the limit and says how
// many it left out; a peer that leaves keeps its bytes in the totals.
func TestNodeMetricsCardinality(t *testing.T) {
	src := &fakeStatus{}
	for i := range 1000 {
		src.sts = append(src.sts, fakePeer(i, []node.PathKind{node.PathDirect, node.PathRelay}[i%2], 10))
	}
	agg := newNodeCollector(src, false, 0)
	two := newNodeCollector(&fakeStatus{sts: src.sts[:2]}, false, 0)
	assert.Equal(t, countSeries(two), countSeries(agg), "series must not grow with peers")
	assert.Equal(t, 5000.0, counterValue(t, agg, "lattice_node_bytes_total", map[string]string{"path": "direct", "direction": "tx"}))
	assert.Equal(t, 500.0, counterValue(t, agg, "lattice_node_peers", map[string]string{"path": "relay"}))

	per := newNodeCollector(src, true, 100)
	assert.Equal(t, 100, countSeries(per, "lattice_node_peer_path"))
	assert.Equal(t, 900.0, counterValue(t, per, "lattice_node_peer_series_omitted", nil))
	assert.Equal(t, 0, countSeries(agg, "lattice_node_peer_path"))

	src.sts = src.sts[2:] // peer-0000 (direct) and peer-0001 (relay) leave
	assert.Equal(t, 5000.0, counterValue(t, agg, "lattice_node_bytes_total", map[string]string{"path": "direct", "direction": "tx"}),
		"a departed peer's bytes stay counted")
	assert.Equal(t, 499.0, counterValue(t, agg, "lattice_node_peers", map[string]string{"path": "relay"}))
}

func TestSwitchReason(t *testing.T) {
	for _, tc := range []struct {
		to     node.PathKind
		reason string
		want   string
	}{
		{node.PathDirect, "ICE nominated a pair", "ice_nominated"},
		{node.PathRelay, "peer registered: relay until a direct path is found", "peer_registered"},
		{node.PathRelay, "idle (lazy): direct path negotiated on first traffic", "idle"},
		{node.PathRelay, "direct paths disabled (RelayOnly)", "relay_only"},
		{node.PathRelay, "attempt timed out after 10s: no srflx", "ice_timeout"},
		{node.PathRelay, "direct path went silent (no answer for 5s)", "direct_silent"},
		{node.PathRelay, "direct path unanswered while carrying traffic (nothing back for 700ms); sending through the relay too until it answers", "direct_unanswered"},
		{node.PathDirect, "direct path answered again", "direct_answered"},
		{node.PathOffline, "control: the peer is not running", "peer_offline"},
		{node.PathRelay, "something new", "other"},
	} {
		assert.Equal(t, tc.want, switchReason(node.PathEvent{To: tc.to, Reason: tc.reason}), tc.reason)
	}
	assert.False(t, strings.Contains(switchReason(node.PathEvent{Reason: strings.Repeat("y", 1000)}), "y"))
}

// countingStatus is a statusSource whose node counts its path switches.
type countingStatus struct {
	*fakeStatus
	switches map[node.SwitchKey]uint64
}

func (c countingStatus) PathSwitches() map[node.SwitchKey]uint64 { return c.switches }

func (c countingStatus) ICECounts() node.ICECounts {
	return node.ICECounts{Attempts: 7, Connected: 3, Failed: 2}
}

// TestNodeMetricsPathSwitchesCounted: a node that counts its path
// switches (and ICE attempts) is exported by its counts, which go past what a peer's 32-event
// history shows; one that does not is sampled from the history.
func TestNodeMetricsPathSwitchesCounted(t *testing.T) {
	st := fakePeer(1, node.PathDirect, 0)
	for i := range 40 {
		to := []node.PathKind{node.PathDirect, node.PathRelay}[i%2]
		st.History = append(st.History, node.PathEvent{Time: time.Unix(int64(i+1), 0), To: to, Reason: "direct path went silent"})
	}
	st.History = st.History[len(st.History)-32:] // as the node keeps it
	src := countingStatus{&fakeStatus{sts: []node.PeerStatus{st}}, map[node.SwitchKey]uint64{
		{To: node.PathDirect, Reason: "ice_nominated"}: 20, {To: node.PathRelay, Reason: "direct_silent"}: 20,
	}}
	c := newNodeCollector(src, false, 0)
	assert.Equal(t, 20.0, counterValue(t, c, "lattice_node_path_switches_total", map[string]string{"to": "relay", "reason": "direct_silent"}))
	assert.Equal(t, 20.0, counterValue(t, c, "lattice_node_path_switches_total", map[string]string{"to": "direct", "reason": "ice_nominated"}))

	assert.Equal(t, 7.0, counterValue(t, c, "lattice_node_ice_attempts_total", nil), "the node's ICE counts")
	assert.Equal(t, 3.0, counterValue(t, c, "lattice_node_ice_outcomes_total", map[string]string{"outcome": "connected"}))
	assert.Equal(t, 2.0, counterValue(t, c, "lattice_node_ice_outcomes_total", map[string]string{"outcome": "failed"}))

	sampled := newNodeCollector(&fakeStatus{sts: []node.PeerStatus{st}}, false, 0)
	assert.Equal(t, 16.0, counterValue(t, sampled, "lattice_node_path_switches_total", map[string]string{"to": "relay", "reason": "direct_silent"}),
		"without the node's counts, only the 32 events of history")
}

// relayedStatus is a statusSource with relay client counters.
type relayedStatus struct {
	*fakeStatus
	transport string
	none      bool // no relay client
}

func (r relayedStatus) RelayStats() (node.RelayStats, bool) {
	return node.RelayStats{ClientStats: relay.ClientStats{Connects: 3, RecvDropped: 1, TokenRenewals: 4, TokenRenewalFailures: 2},
		Transport: r.transport}, !r.none
}

// TestNodeMetricsRelayClient: a source with relay counters exports them,
// and whether it is connected; one without (or whose node has no relay
// client) exports none.
func TestNodeMetricsRelayClient(t *testing.T) {
	c := newNodeCollector(relayedStatus{fakeStatus: &fakeStatus{}, transport: "quic"}, false, 0)
	assert.Equal(t, 3.0, counterValue(t, c, "lattice_node_relay_connects_total", nil))
	assert.Equal(t, 2.0, counterValue(t, c, "lattice_node_relay_token_renewals_total", map[string]string{"result": "failed"}))
	assert.Equal(t, 1.0, counterValue(t, c, "lattice_node_relay_connected", map[string]string{"transport": "quic"}))
	down := newNodeCollector(relayedStatus{fakeStatus: &fakeStatus{}}, false, 0)
	assert.Equal(t, 0.0, counterValue(t, down, "lattice_node_relay_connected", map[string]string{"transport": "none"}))
	assert.Equal(t, 1, countSeries(down, "lattice_node_relay_connected"))
	assert.Equal(t, 0, countSeries(newNodeCollector(&fakeStatus{}, false, 0), "lattice_node_relay_connects_total"))
	assert.Equal(t, 0, countSeries(newNodeCollector(relayedStatus{fakeStatus: &fakeStatus{}, none: true}, false, 0), "lattice_node_relay_connects_total"))
}

// BenchmarkNodeCollect1000Peers: one scrape of a node with 1000 peers
// (status snapshot given), aggregated and with per-peer series capped at
// 100.
func BenchmarkNodeCollect1000Peers(b *testing.B) {
	src := &fakeStatus{}
	for i := range 1000 {
		st := fakePeer(i, []node.PathKind{node.PathDirect, node.PathRelay}[i%2], 10)
		st.History = []node.PathEvent{{Time: time.Unix(int64(i), 0), To: st.Path, Reason: "ICE nominated a pair"}}
		st.LastHandshake = time.Now()
		src.sts = append(src.sts, st)
	}
	for _, perPeer := range []bool{false, true} {
		b.Run(fmt.Sprintf("per-peer=%v", perPeer), func(b *testing.B) {
			c := newNodeCollector(src, perPeer, 100)
			series := 0
			for b.Loop() {
				series = countSeries(c)
			}
			b.ReportMetric(float64(series), "series")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/scrape")
		})
	}
}
