package scenario

import (
	"context"
	"fmt"
	"io"
	"net"
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
	// EchoConn connects node from's host, on the underlay (through its
	// NATs, not the overlay), to an echo server the lab starts on host
	// to for this connection; closing the connection stops the server.
	EchoConn(ctx context.Context, from, to string) (net.Conn, error)
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
	if d <= 0 {
		// On the virtual clock a path with no delay on it (an in-process
		// relay) carries everything in no network time: there is no rate
		// to report, and +Inf would make the report's JSON unwritable.
		return fmt.Sprintf("%v in no network time (no delay on the path), SHA-256 ok", a.Bytes), nil, nil
	}
	m := report.Metric{Name: "throughput", Value: float64(a.Bytes) * 8 / d.Seconds() / 1e6, Unit: "Mbit/s"}
	prec := 0 // a slow link's rate keeps its digits: 0.081 Mbit/s, not 0
	switch {
	case m.Value < 1:
		prec = 3
	case m.Value < 10:
		prec = 1
	}
	detail := fmt.Sprintf("%v in %s, %.*f Mbit/s, SHA-256 ok", a.Bytes, FormatDuration(d), prec, m.Value)
	if min := float64(a.MinThroughput) / 1e6; min > 0 && m.Value < min {
		return detail, []report.Metric{m}, fmt.Errorf("%s: below %s", detail, a.MinThroughput)
	}
	return detail, []report.Metric{m}, nil
}

// TCPIdle holds a TCP connection idle through a node's NATs (tcp_idle).
type TCPIdle struct {
	From   string        `yaml:"from" required:"true" doc:"The node whose host opens the connection, on the underlay: through its NATs, not the overlay."`
	To     string        `yaml:"to" required:"true" doc:"A host, outside the node's NATs, where the lab listens and echoes."`
	Idle   time.Duration `yaml:"idle" required:"true" min:"1ms" max:"8760h" doc:"How long the connection stays silent after its first echo."`
	Expect string        `yaml:"expect" required:"true" enum:"alive|dropped" doc:"alive: a message after the idle spell comes back; dropped: it does not (a NAT forgot the flow)."`
	Within time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"How long to wait for the echo after the idle spell (and for the connection and first echo before it). If zero, 10s."`
}

func (a *TCPIdle) check(k *checker, path string) {
	k.node(path+".from", a.From)
	if k.plan.Host(a.To) == nil {
		names := make([]string, 0, len(k.plan.Hosts))
		for _, h := range k.plan.Hosts {
			names = append(names, h.Config.Name)
		}
		k.errorf(path+".to", unknownHint(a.To, names, "hosts"), "no host %q", a.To)
	}
}

// Describe implements Action.
func (a *TCPIdle) Describe() string {
	return fmt.Sprintf("TCP %s → %s idle %s (want %s)", a.From, a.To, a.Idle, a.Expect)
}

// Run implements Action.
func (a *TCPIdle) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	open, cancel := env.Within(ctx, a.Within, 10*time.Second)
	conn, err := env.EchoConn(open, a.From, a.To)
	if err != nil {
		cancel()
		return "", nil, fmt.Errorf("connect %s → %s: %w", a.From, a.To, err)
	}
	defer conn.Close()
	err = echo(open, conn, "before the idle spell")
	cancel()
	if err != nil {
		return "", nil, err
	}
	local := conn.LocalAddr()
	if err := sleep(ctx, a.Idle); err != nil {
		return "", nil, err
	}
	after, cancel := env.Within(ctx, a.Within, 10*time.Second)
	defer cancel()
	err = echo(after, conn, "after "+a.Idle.String()+" idle")
	switch {
	case ctx.Err() != nil:
		return "", nil, context.Cause(ctx)
	case a.Expect == "alive" && err != nil:
		return "", nil, fmt.Errorf("from %v: %w", local, err)
	case a.Expect == "dropped" && err == nil:
		return "", nil, fmt.Errorf("from %v: the connection still works after %s idle, want it dropped", local, a.Idle)
	case a.Expect == "dropped":
		return fmt.Sprintf("dropped after %s idle: %v", a.Idle, err), nil, nil
	}
	return fmt.Sprintf("alive after %s idle, from %v", a.Idle, local), nil, nil
}

// echo sends a line over c and reads it back before ctx ends.
func echo(ctx context.Context, c net.Conn, when string) error {
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	msg := []byte("lattice-lab tcp_idle " + when + "\n")
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("write %s: %w", when, err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", context.Cause(ctx), err)
		}
		return fmt.Errorf("no echo %s: %w", when, err)
	}
	if string(got) != string(msg) {
		return fmt.Errorf("echo %s: got %q, want %q", when, got, msg)
	}
	return nil
}
