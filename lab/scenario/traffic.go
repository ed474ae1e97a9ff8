package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/topology"
)

// TrafficEnv is what the traffic steps ask of the lab.
type TrafficEnv interface {
	// Ping sends count UDP echoes from one node to another over the
	// overlay.
	Ping(ctx context.Context, from, to string, count int) (PingResult, error)
	// Fetch makes an HTTP GET from a node over the overlay and returns
	// the status and body.
	Fetch(ctx context.Context, from, rawURL string) (int, string, error)
	// Transfer sends size bytes over TCP and returns how long they took
	// to arrive intact.
	Transfer(ctx context.Context, from, to string, size int64) (time.Duration, error)
}

// PingResult is what a ping did.
type PingResult struct {
	Sent, Received int
	AvgRTT         time.Duration
}

// Ping is UDP echo over the overlay.
type Ping struct {
	From    string              `yaml:"from" required:"true" doc:"The sending node."`
	To      string              `yaml:"to" required:"true" doc:"The echoing node (every node echoes UDP on port 7)."`
	Count   int                 `yaml:"count" min:"1" max:"10000" doc:"Round trips. If zero, 5."`
	Within  time.Duration       `yaml:"within" min:"10ms" max:"1h" doc:"Bound on the whole step; the first answer may take retries. If zero, 10s."`
	MaxLoss strictyaml.Fraction `yaml:"max_loss" doc:"Share of round trips that may go unanswered. If omitted, none."`
	MaxRTT  time.Duration       `yaml:"max_rtt" max:"1h" doc:"Fail if the average round trip is longer."`
}

func (a *Ping) check(k *checker, path string) { k.pair(path, a.From, a.To) }

// Describe implements Action.
func (a *Ping) Describe() string { return fmt.Sprintf("ping %s → %s", a.From, a.To) }

// Run implements Action.
func (a *Ping) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, a.Within, 10*time.Second)
	defer cancel()
	count := a.Count
	if count == 0 {
		count = 5
	}
	res, err := env.Ping(ctx, a.From, a.To, count)
	if err != nil {
		return "", nil, err
	}
	loss := 1 - float64(res.Received)/float64(res.Sent)
	detail := fmt.Sprintf("%d/%d answered, avg %s", res.Received, res.Sent, FormatDuration(res.AvgRTT))
	metrics := []report.Metric{{Name: "rtt", Value: float64(res.AvgRTT) / 1e6, Unit: "ms"}, {Name: "loss", Value: loss * 100, Unit: "%"}}
	switch {
	case loss > float64(a.MaxLoss):
		return detail, metrics, fmt.Errorf("%s: lost %.0f%%, at most %v allowed", detail, loss*100, a.MaxLoss)
	case a.MaxRTT > 0 && res.AvgRTT > a.MaxRTT:
		return detail, metrics, fmt.Errorf("%s: average round trip above %v", detail, a.MaxRTT)
	}
	return detail, metrics, nil
}

// Fetch is an HTTP GET over the overlay.
type Fetch struct {
	From     string        `yaml:"from" required:"true" doc:"The fetching node."`
	URL      string        `yaml:"url" required:"true" pattern:"^http://[^/]+(/.*)?$" doc:"http://HOST[:PORT]/PATH; HOST is a node's name or overlay address." example:"http://bob/"`
	Status   int           `yaml:"status" min:"100" max:"599" doc:"Expected status. If zero, 200."`
	Contains string        `yaml:"contains" doc:"Text the body must contain."`
	Within   time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"Retry until this long has passed. If zero, 10s."`
}

func (a *Fetch) check(k *checker, path string) {
	k.node(path+".from", a.From)
	k.urlHost(path+".url", a.URL)
}

// Describe implements Action.
func (a *Fetch) Describe() string { return fmt.Sprintf("%s fetches %s", a.From, a.URL) }

// Run implements Action.
func (a *Fetch) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, a.Within, 10*time.Second)
	defer cancel()
	var body string
	err := retry(ctx, func(ctx context.Context) error {
		status, b, err := env.Fetch(ctx, a.From, a.URL)
		if err != nil {
			return err
		}
		body = b
		return checkBody(status, b, a.Status, a.Contains)
	})
	return fmt.Sprintf("%q", trim(body)), nil, err
}

// Transfer sends bytes through the overlay.
type Transfer struct {
	From          string          `yaml:"from" required:"true" doc:"The sending node."`
	To            string          `yaml:"to" required:"true" doc:"The receiving node."`
	Bytes         strictyaml.Size `yaml:"bytes" required:"true" doc:"How much to send." example:"16MiB"`
	Within        time.Duration   `yaml:"within" min:"10ms" max:"1h" doc:"Bound on the transfer. If zero, 60s."`
	MinThroughput topology.Rate   `yaml:"min_throughput" doc:"Fail below this rate." example:"50Mbit"`
}

func (a *Transfer) check(k *checker, path string) {
	k.pair(path, a.From, a.To)
	if a.Bytes <= 0 {
		k.errorf(path+".bytes", "", "nothing to send")
	}
}

// Describe implements Action.
func (a *Transfer) Describe() string {
	return fmt.Sprintf("transfer %v %s → %s", a.Bytes, a.From, a.To)
}

// Run implements Action.
func (a *Transfer) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, a.Within, 60*time.Second)
	defer cancel()
	d, err := env.Transfer(ctx, a.From, a.To, int64(a.Bytes))
	if err != nil {
		return "", nil, err
	}
	m := report.Metric{Name: "throughput", Value: float64(a.Bytes) * 8 / d.Seconds() / 1e6, Unit: "Mbit/s"}
	detail := fmt.Sprintf("%v in %s, %.0f Mbit/s, SHA-256 ok", a.Bytes, FormatDuration(d), m.Value)
	if min := float64(a.MinThroughput) / 1e6; min > 0 && m.Value < min {
		return detail, []report.Metric{m}, fmt.Errorf("%s: below %s", detail, a.MinThroughput)
	}
	return detail, []report.Metric{m}, nil
}
