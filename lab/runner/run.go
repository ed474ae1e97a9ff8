package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/internal/owner"
	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/scenario"
)

// DefaultTimeout bounds a scenario that sets none.
const DefaultTimeout = 2 * time.Minute

// Options tune RunScenario.
type Options struct {
	// StateDir, CaptureDir, Owner, Progress and Logger are as in Config.
	StateDir   string
	CaptureDir string
	Owner      owner.Owner
	Progress   func(string)
	Logger     *slog.Logger
	// Slowdown multiplies every step's time limit and the scenario's
	// timeout, for slow machines and the race detector (which makes the
	// mesh about ten times slower). If zero, 1. Ignored on the virtual
	// clock, where the race detector costs wall time, not network time.
	Slowdown float64
	// Clock is the clock RunScenario runs on, recorded in the result. Only
	// a caller that runs it in a testing/synctest bubble sets virtual (see
	// lab/labtest/scenariotest), and then sets the result's Started and
	// Wall from outside the bubble. If empty, real: the result's Wall is
	// its Duration.
	Clock report.Clock
	// OrderInstants is as in Config.
	OrderInstants bool
}

// NeedsVirtual is why a scenario with requires: [virtual] is skipped on
// the wall clock.
const NeedsVirtual = "needs the virtual clock (hours of network time): go test $(scripts/vtime-flags.sh) ./scenarios/..., or make scenarios"

// SkipReason says why a scenario cannot run in this build or on this
// machine, or "" when it can.
func SkipReason(f *scenario.File) string {
	for _, r := range f.Requires {
		switch r {
		case "pro":
			if !edition.Pro() {
				return "needs the Pro edition (go test -tags pro, make EDITION=pro)"
			}
		case "gvisor":
			if err := GVisorReady(); err != nil {
				return err.Error()
			}
		case "root":
			if os.Geteuid() != 0 {
				return "needs root (network namespaces for netns hosts)"
			}
		}
	}
	return ""
}

// RunScenario brings a scenario's topology up, runs its timeline, and
// tears everything down. The result says what passed and failed; the
// error is for what kept the scenario from running at all (a topology
// that does not come up counts as a failure in the result too).
func RunScenario(ctx context.Context, f *scenario.File, opt Options) *report.Result {
	clk := opt.Clock
	if clk == "" {
		clk = report.ClockReal
	}
	res := &report.Result{Scenario: f.Name, File: f.Path, Description: f.Description, Topology: f.Plan().Name,
		Tags: f.Tags, Edition: edition.Name(), Started: time.Now(), Clock: clk}
	for i := range f.Plan().Nodes {
		pn := &f.Plan().Nodes[i]
		n := report.Node{Name: pn.Name, Network: pn.Network, NAT: f.Plan().NATLabel(pn)}
		if pn.Sandbox != nil {
			n.Sandbox = pn.Sandbox.Mode
		}
		res.Nodes = append(res.Nodes, n)
	}
	defer func() {
		res.Duration = time.Since(res.Started)
		if clk == report.ClockReal {
			res.Wall = res.Duration
		}
	}()
	if why := SkipReason(f); why != "" {
		res.Status, res.SkipReason = report.Skipped, why
		return res
	}
	if clk == report.ClockReal && slices.Contains(f.Requires, scenario.RequiresVirtual) {
		res.Status, res.SkipReason = report.Skipped, NeedsVirtual
		return res
	}
	timeout := f.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	slow := max(opt.Slowdown, 1)
	if clk == report.ClockVirtual {
		slow = 1
	}
	timeout = time.Duration(float64(timeout) * slow)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("scenario timed out after %v", timeout))
	defer cancel()
	nodes := f.Nodes
	l, err := Up(ctx, Config{Plan: f.Plan(), Nodes: nodes, StateDir: opt.StateDir, CaptureDir: opt.CaptureDir, Owner: opt.Owner, OrderInstants: opt.OrderInstants,
		Progress: opt.Progress, Logger: opt.Logger})
	if err != nil {
		if errors.Is(err, ErrNotAvailable) {
			res.Status, res.SkipReason = report.Skipped, err.Error()
			return res
		}
		res.Status, res.Error = report.Failed, "bring-up: "+causeOf(ctx, err).Error()
		return res
	}
	r := &run{l: l, f: f, res: res, bg: map[string]*background{}, progress: opt.Progress, slow: slow}
	smp := startSampling(ctx, l) // the report's bytes per path (sampler.go)
	r.timeline(ctx)
	res.Traffic = smp.stop()
	res.Pairs, res.Events = l.Pairs()
	if err := l.Close(); err != nil && res.Status == report.Passed {
		res.Status, res.Error = report.Failed, "teardown: "+err.Error()
	}
	res.Captures = l.Captures() // after Close, which completes them and drops the empty ones
	return res
}

// causeOf prefers the context's cause (a timeout, an interrupt) to the
// symptom it produced.
func causeOf(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// run is one scenario's timeline in progress.
type run struct {
	l        *Lab
	f        *scenario.File
	res      *report.Result
	progress func(string)
	bg       map[string]*background
	slow     float64
}

type background struct {
	done chan struct{}
	step report.Step
}

func (r *run) say(format string, args ...any) {
	if r.progress != nil {
		r.progress(fmt.Sprintf(format, args...))
	}
}

// timeline runs every step in order; the first failure ends it.
func (r *run) timeline(ctx context.Context) {
	r.res.Status = report.Passed
	total := len(r.f.Steps)
	for i := range r.f.Steps {
		s := &r.f.Steps[i]
		action, a := s.Action()
		label := s.Name
		if label == "" && a != nil {
			label = a.Describe()
		}
		step := report.Step{Index: i + 1, Action: action, Label: label, Started: r.l.Since()}
		if s.Background != "" {
			b := &background{done: make(chan struct{})}
			r.bg[s.Background] = b
			r.say("[%d/%d] %s (in the background as %s)", i+1, total, label, s.Background)
			go func() {
				defer close(b.done)
				b.step = r.exec(ctx, a, step)
			}()
			continue
		}
		r.say("[%d/%d] %s", i+1, total, label)
		step = r.exec(ctx, a, step)
		r.res.Steps = append(r.res.Steps, step)
		if step.Status == report.Failed {
			r.fail(ctx, step)
			return
		}
	}
	for id, b := range r.bg {
		<-b.done
		r.res.Steps = append(r.res.Steps, b.step)
		if b.step.Status == report.Failed {
			r.fail(ctx, b.step)
			return
		}
		delete(r.bg, id)
	}
}

func (r *run) fail(ctx context.Context, step report.Step) {
	r.res.Status = report.Failed
	r.res.Error = fmt.Sprintf("step %d (%s): %s", step.Index, step.Label, step.Error)
	// Let background steps notice the end before the lab closes.
	for _, b := range r.bg {
		select {
		case <-b.done:
		case <-time.After(time.Until(deadlineOr(ctx, 5*time.Second))):
		}
	}
}

func deadlineOr(ctx context.Context, d time.Duration) time.Time {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return dl
	}
	return time.Now().Add(d)
}

// exec runs one step's action and reports its outcome.
func (r *run) exec(ctx context.Context, a scenario.Action, step report.Step) report.Step {
	start := time.Now()
	detail, metrics, err := "", []report.Metric(nil), errors.New("step has no action")
	if a != nil {
		detail, metrics, err = a.Run(ctx, stepEnv{Lab: r.l, r: r})
	}
	step.Duration = time.Since(start)
	step.Detail, step.Metrics = detail, metrics
	if err != nil {
		step.Status, step.Error = report.Failed, causeOf(ctx, err).Error()
		r.say("  ✗ %s", step.Error)
		return step
	}
	step.Status = report.Passed
	if detail != "" {
		r.say("  ✓ %s  %s", detail, scenario.FormatDuration(step.Duration))
	} else {
		r.say("  ✓ %s", scenario.FormatDuration(step.Duration))
	}
	return step
}

// stepEnv is the scenario.Env steps run against: the lab, and the run
// for what belongs to the timeline (limits, progress, background steps).
type stepEnv struct {
	*Lab
	r *run
}

var _ scenario.Env = stepEnv{}

// Within implements scenario.Env.
func (e stepEnv) Within(ctx context.Context, d, def time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		d = def
	}
	d = time.Duration(float64(d) * e.r.slow)
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("not within %v", d))
}

// Say implements scenario.Env.
func (e stepEnv) Say(format string, args ...any) { e.r.say(format, args...) }

// Join implements scenario.TimelineEnv.
func (e stepEnv) Join(ctx context.Context, id string) (string, error) {
	r := e.r
	b := r.bg[id]
	select {
	case <-b.done:
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
	delete(r.bg, id)
	r.res.Steps = append(r.res.Steps, b.step)
	if b.step.Status == report.Failed {
		return "", fmt.Errorf("background step %d (%s): %s", b.step.Index, b.step.Label, b.step.Error)
	}
	return b.step.Detail, nil
}
