package scenario

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/strictyaml"
)

// Metric implements MetricEnv for the other steps' fake lab, which
// scrapes nothing; metricEnv below answers scrapes.
func (*fakeEnv) Metric(string, string, map[string]string) (MetricScrape, error) {
	return MetricScrape{}, errors.New("fakeEnv: no metrics")
}

// TestParseAssertMetric: a good step decodes with its labels, op and
// value (a number or a size); a bad field, metric name, label, op or
// value is an error at its line and column.
func TestParseAssertMetric(t *testing.T) {
	f, err := Parse("s.yaml", []byte(inlineWorld+`steps:
  - assert_metric: {node: alice, metric: lattice_node_bytes_total, labels: {path: direct, direction: tx}, op: ">=", value: 1MiB, within: 2s}
  - assert_metric: {node: bob, metric: lattice_node_peer_rtt_seconds, op: "<=", value: 0.25}
  - assert_metric: {node: bob, metric: lattice_node_peers, labels: {path: relay}, op: "==", value: 0}
`), Options{})
	require.NoError(t, err)
	a := f.Steps[0].AssertMetric
	require.NotNil(t, a)
	assert.Equal(t, AssertMetric{Node: "alice", Metric: "lattice_node_bytes_total",
		Labels: []MetricLabel{{"path", "direct"}, {"direction", "tx"}}, Op: ">=", Value: 1 << 20, Within: 2 * time.Second}, *a)
	assert.Equal(t, `alice's lattice_node_bytes_total{direction="tx",path="direct"} >= 1048576`, a.Describe())
	assert.Equal(t, MetricValue(0.25), f.Steps[1].AssertMetric.Value)
	assert.Equal(t, "==", f.Steps[2].AssertMetric.Op)

	for _, tt := range []struct{ name, steps, want string }{
		{
			name: "unknown field",
			steps: `steps:
  - assert_metric: {node: alice, metric: lattice_node_peers, op: ">=", value: 1, lables: {path: direct}}
`,
			want: `1 problem:
s.yaml:19:82: steps[1].assert_metric: unknown key "lables"; did you mean "labels"? (known keys: node, metric, labels, op, value, within)`,
		},
		{
			name: "bad metric name and label",
			steps: `steps:
  - assert_metric: {node: alice, metric: lattice_node_byte_total, op: ">=", value: 1}
  - assert_metric: {node: alice, metric: lattice_node_bytes_total, labels: {paht: direct}, op: ">=", value: 1}
  - assert_metric: {node: alice, metric: lattice_node_peers_without_handshake, labels: {path: direct}, op: "==", value: 0}
`,
			want: `3 problems:
s.yaml:19:42: steps[1].assert_metric.metric: no node metric "lattice_node_byte_total"; did you mean "lattice_node_bytes_total"?
s.yaml:20:77: steps[2].assert_metric.labels.paht: lattice_node_bytes_total has no label "paht"; did you mean "path"?
s.yaml:21:89: steps[3].assert_metric.labels.path: lattice_node_peers_without_handshake has no label "path"; lattice_node_peers_without_handshake has no labels`,
		},
		{
			name: "bad op, value and node",
			steps: `steps:
  - assert_metric: {node: alice, metric: lattice_node_peers, op: ">", value: 1}
  - assert_metric: {node: alice, metric: lattice_node_peers, op: "==", value: lots}
  - assert_metric: {node: carol, metric: lattice_node_peers, op: "==", value: 1}
  - assert_metric: {node: alice, metric: lattice_node_peers, value: 1}
`,
			want: `4 problems:
s.yaml:19:66: steps[1].assert_metric.op: unknown value ">"; did you mean ">="? (one of: >=, <=, ==)
s.yaml:20:79: steps[2].assert_metric.value: want a number such as 3 or 0.5, or a size such as 1MiB, got "lots"
s.yaml:21:27: steps[3].assert_metric.node: node carol is not running at this step; start it with a start step first, or list it in nodes
s.yaml:22:21: steps[4].assert_metric: missing required key "op"; op: The comparison: the metric OP value`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("s.yaml", []byte(inlineWorld+tt.steps), Options{})
			require.Error(t, err)
			assert.ErrorIs(t, err, strictyaml.ErrInvalid)
			assert.Equal(t, tt.want, err.Error())
		})
	}
}

// metricEnv answers scrapes from a list, one per call, the last repeated.
type metricEnv struct {
	*fakeEnv
	scrapes []MetricScrape
	calls   int
}

func (e *metricEnv) Metric(node, name string, labels map[string]string) (MetricScrape, error) {
	i := min(e.calls, len(e.scrapes)-1)
	e.calls++
	return e.scrapes[i], nil
}

// TestRunAssertMetric: each op compares, within keeps scraping until it
// holds, and a missing series names the ones there are.
func TestRunAssertMetric(t *testing.T) {
	bytes := AssertMetric{Node: "alice", Metric: "lattice_node_bytes_total", Labels: []MetricLabel{{"path", "direct"}, {"direction", "tx"}}, Op: ">=", Value: 1000}
	for _, tt := range []struct {
		name       string
		a          AssertMetric
		scrapes    []MetricScrape
		wantDetail string
		wantErr    string
		wantCalls  int
	}{
		{name: ">= holds", a: bytes, scrapes: []MetricScrape{{Value: 1000, Matched: 1}},
			wantDetail: `lattice_node_bytes_total{direction="tx",path="direct"} = 1000`, wantCalls: 1},
		{name: ">= fails at once without within", a: bytes, scrapes: []MetricScrape{{Value: 999, Matched: 1}, {Value: 5000, Matched: 1}},
			wantErr: `lattice_node_bytes_total{direction="tx",path="direct"} = 999, want >= 1000`, wantCalls: 1},
		{name: "within waits for it", a: func() AssertMetric { a := bytes; a.Within = time.Second; return a }(),
			scrapes:    []MetricScrape{{Value: 10, Matched: 1}, {Value: 500, Matched: 1}, {Value: 1500, Matched: 1}},
			wantDetail: `lattice_node_bytes_total{direction="tx",path="direct"} = 1500`, wantCalls: 3},
		{name: "<= fails", a: AssertMetric{Node: "alice", Metric: "lattice_node_peers", Op: "<=", Value: 2}, scrapes: []MetricScrape{{Value: 3, Matched: 3}},
			wantErr: "lattice_node_peers = 3, want <= 2", wantCalls: 1},
		{name: "== holds", a: AssertMetric{Node: "alice", Metric: "lattice_node_peers", Op: "==", Value: 3}, scrapes: []MetricScrape{{Value: 3, Matched: 3}},
			wantDetail: "lattice_node_peers = 3", wantCalls: 1},
		{name: "no such series", a: AssertMetric{Node: "alice", Metric: "lattice_node_ice_state", Labels: []MetricLabel{{"state", "connected"}}, Op: ">=", Value: 1},
			scrapes: []MetricScrape{{Series: `{state="checking"}`}},
			wantErr: `alice has no series lattice_node_ice_state{state="connected"}; it has {state="checking"}`, wantCalls: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			env := &metricEnv{fakeEnv: &fakeEnv{}, scrapes: tt.scrapes}
			detail, m, err := tt.a.Run(ctx, env)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tt.wantErr, err.Error())
			} else {
				require.NoError(t, err)
				assert.Equal(t, tt.wantDetail, detail)
				require.Len(t, m, 1)
			}
			assert.Equal(t, tt.wantCalls, env.calls)
		})
	}
}

// transferEnv is a lab whose transfers take no network time, as an
// in-process relay's do on the virtual clock.
type transferEnv struct{ *fakeEnv }

func (transferEnv) Transfer(context.Context, string, string, int64) (time.Duration, error) {
	return 0, nil
}

// TestTransferInNoTime: a transfer that took no network time reports no
// throughput (not +Inf, which JSON cannot hold) and passes a minimum.
func TestTransferInNoTime(t *testing.T) {
	a := &Transfer{From: "alice", To: "bob", Bytes: 2 << 20, MinThroughput: 1e6}
	detail, m, err := a.Run(t.Context(), transferEnv{&fakeEnv{}})
	require.NoError(t, err)
	assert.Empty(t, m)
	assert.Equal(t, "2MiB in no network time (no delay on the path), SHA-256 ok", detail)
}
