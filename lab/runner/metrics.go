package runner

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/latticelab/lattice/internal/metrics"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/node"
)

// labScrape holds a metrics collector per node, made on the first scrape:
// internal/metrics.NodeCollector, the one `lattice up` serves on /metrics,
// gathered in process. A collector outlives its node's restarts (it reads
// whichever node runs under the name), so counters keep what a stopped
// node had counted, as they would across a peer's restart.
type labScrape struct {
	mu   sync.Mutex // guards regs
	regs map[string]*prometheus.Registry
}

// labNodeStatus is a node of the lab as the collector reads it: the node
// running under the name now, or no peers while it is stopped.
type labNodeStatus struct {
	l    *Lab
	name string
}

func (s labNodeStatus) Status() []node.PeerStatus {
	rn, err := s.l.node(s.name)
	if err != nil {
		return nil
	}
	return rn.status()
}

// gather scrapes a node's metrics.
func (l *Lab) gather(name string) ([]*dto.MetricFamily, error) {
	if l.plan.Node(name) == nil {
		return nil, fmt.Errorf("no node %q", name)
	}
	l.scrape.mu.Lock()
	reg := l.scrape.regs[name]
	if reg == nil {
		reg = prometheus.NewRegistry()
		if err := reg.Register(metrics.NewNodeCollector(labNodeStatus{l, name}, false, 0)); err != nil {
			l.scrape.mu.Unlock()
			return nil, fmt.Errorf("register node %s's collector: %w", name, err)
		}
		if l.scrape.regs == nil {
			l.scrape.regs = map[string]*prometheus.Registry{}
		}
		l.scrape.regs[name] = reg
	}
	l.scrape.mu.Unlock()
	mfs, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather node %s's metrics: %w", name, err)
	}
	return mfs, nil
}

// Metric implements scenario.MetricEnv.
func (l *Lab) Metric(nodeName, name string, labels map[string]string) (scenario.MetricScrape, error) {
	mfs, err := l.gather(nodeName)
	if err != nil {
		return scenario.MetricScrape{}, err
	}
	v, n, err := sumSeries(mfs, name, labels)
	return scenario.MetricScrape{Value: v, Matched: n, Series: seriesList(mfs, name)}, err
}

// sumSeries adds the values of name's series that carry labels: a
// counter's or gauge's value, a histogram's observation count.
func sumSeries(mfs []*dto.MetricFamily, name string, labels map[string]string) (float64, int, error) {
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		n := 0
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			n++
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			default:
				return 0, 0, fmt.Errorf("metric %s is a %s, which assert_metric cannot read", name, mf.GetType())
			}
		}
		return sum, n, nil
	}
	return 0, 0, nil
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, lp := range m.GetLabel() {
		have[lp.GetName()] = lp.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// seriesList prints a family's series, for an error naming what exists.
func seriesList(mfs []*dto.MetricFamily, name string) string {
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			kv := map[string]string{}
			for _, lp := range m.GetLabel() {
				kv[lp.GetName()] = lp.GetValue()
			}
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(kv)) {
				parts = append(parts, fmt.Sprintf("%s=%q", k, kv[k]))
			}
			out = append(out, "{"+strings.Join(parts, ",")+"}")
		}
	}
	return strings.Join(out, " ")
}
