package scenario

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/latticelab/lattice/internal/metrics"
	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/report"
)

// MetricEnv is what assert_metric asks of the lab.
type MetricEnv interface {
	// Metric scrapes node's collector (the one `lattice up` serves on
	// /metrics, gathered in process) and returns the sum of name's series
	// whose labels include labels.
	Metric(node, name string, labels map[string]string) (MetricScrape, error)
}

// MetricScrape is what a scrape found of one metric.
type MetricScrape struct {
	Value   float64 // the sum of the matching series
	Matched int     // how many series matched
	Series  string  // every series of the metric, {k="v",…} each, for errors
}

// AssertMetric checks a node metric (assert_metric).
type AssertMetric struct {
	Node   string        `yaml:"node" required:"true" doc:"The node whose metrics are scraped."`
	Metric string        `yaml:"metric" required:"true" doc:"A node metric's name (docs/METRICS.md), e.g. lattice_node_bytes_total." example:"lattice_node_bytes_total"`
	Labels []MetricLabel `yaml:"labels,keyed" doc:"Label values the series must have; the values of every series that has them are summed (a histogram counts its observations). If omitted, every series of the metric."`
	Op     string        `yaml:"op" required:"true" enum:">=|<=|==" doc:"The comparison: the metric OP value."`
	Value  MetricValue   `yaml:"value" required:"true" doc:"The number compared with, or a size such as 1MiB." example:"1MiB"`
	Within time.Duration `yaml:"within" max:"1h" doc:"Keep scraping until the comparison holds, for at most this long. If zero, checked once."`
}

// MetricLabel is a label's value a series must have: labels: {path: direct}.
type MetricLabel struct {
	Name  string `yaml:",key" doc:"The label's name."`
	Value string `yaml:"value,shorthand" required:"true" doc:"Its value."`
}

// labels returns the step's labels as a map.
func (a *AssertMetric) labels() map[string]string {
	m := make(map[string]string, len(a.Labels))
	for _, l := range a.Labels {
		m[l.Name] = l.Value
	}
	return m
}

// MetricValue is a number, or a size (1MiB) for byte counters.
type MetricValue float64

var _ strictyaml.Scalar = (*MetricValue)(nil)

// Expect implements strictyaml.Scalar.
func (*MetricValue) Expect() string { return "a number such as 3 or 0.5, or a size such as 1MiB" }

// UnmarshalText implements strictyaml.Scalar.
func (v *MetricValue) UnmarshalText(b []byte) error {
	if f, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%q is not a finite number", b)
		}
		*v = MetricValue(f)
		return nil
	}
	var s strictyaml.Size
	if err := s.UnmarshalText(b); err != nil {
		return fmt.Errorf("want %s, got %q", v.Expect(), b)
	}
	*v = MetricValue(s)
	return nil
}

func (a *AssertMetric) check(k *checker, path string) {
	k.node(path+".node", a.Node)
	known := metrics.NodeMetrics()
	labels, ok := known[a.Metric]
	if !ok {
		k.errorf(path+".metric", unknownHint(a.Metric, slices.Sorted(maps.Keys(known)), "node metrics"),
			"no node metric %q", a.Metric)
		return
	}
	for _, ml := range a.Labels {
		if l := ml.Name; !slices.Contains(labels, l) {
			hint := unknownHint(l, labels, "its labels")
			if len(labels) == 0 {
				hint = a.Metric + " has no labels"
			}
			k.errorf(path+".labels."+l, hint, "%s has no label %q", a.Metric, l)
		}
	}
}

// Describe implements Action.
func (a *AssertMetric) Describe() string {
	return fmt.Sprintf("%s's %s %s %v", a.Node, a.series(), a.Op, formatValue(float64(a.Value)))
}

// series writes the metric as Prometheus does: name{k="v",…}.
func (a *AssertMetric) series() string {
	if len(a.Labels) == 0 {
		return a.Metric
	}
	var parts []string
	m := a.labels()
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, m[k]))
	}
	return a.Metric + "{" + strings.Join(parts, ",") + "}"
}

// Run implements Action.
func (a *AssertMetric) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	var cancel context.CancelFunc = func() {}
	if a.Within > 0 {
		ctx, cancel = env.Within(ctx, a.Within, a.Within)
	}
	defer cancel()
	for {
		sc, err := env.Metric(a.Node, a.Metric, a.labels())
		v := sc.Value
		if err != nil {
			return "", nil, fmt.Errorf("scrape %s's metrics: %w", a.Node, err)
		}
		detail := fmt.Sprintf("%s = %s", a.series(), formatValue(v))
		m := []report.Metric{{Name: a.Metric, Value: v}}
		switch {
		case sc.Matched == 0 && sc.Series == "":
			err = fmt.Errorf("%s exports no series of %s yet", a.Node, a.Metric)
		case sc.Matched == 0:
			err = fmt.Errorf("%s has no series %s; it has %s", a.Node, a.series(), sc.Series)
		case !a.holds(v):
			err = fmt.Errorf("%s, want %s %s", detail, a.Op, formatValue(float64(a.Value)))
		default:
			return detail, m, nil
		}
		if a.Within == 0 {
			return detail, m, err
		}
		if werr := sleep(ctx, 100*time.Millisecond); werr != nil {
			return detail, m, fmt.Errorf("%w (%w)", err, werr)
		}
	}
}

func (a *AssertMetric) holds(v float64) bool {
	want := float64(a.Value)
	switch a.Op {
	case ">=":
		return v >= want
	case "<=":
		return v <= want
	case "==":
		return v == want
	}
	return false
}

func formatValue(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
