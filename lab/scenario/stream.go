package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/topology"
)

// StreamEnv is what a stream step asks of the lab.
type StreamEnv interface {
	// StartStream starts sending spec.Bytes from one node to another over
	// TCP on the overlay and returns at once; the stream runs until every
	// byte has arrived and was checked, it fails, or ctx ends.
	StartStream(ctx context.Context, spec StreamSpec) (StreamRun, error)
}

// StreamSpec is what a stream sends.
type StreamSpec struct {
	From, To string
	Bytes    int64
	// Rate paces the sender in bits per second; zero sends as fast as
	// the path takes it.
	Rate float64
	// Resume reconnects a broken connection and resumes at the offset
	// the receiver has checked; without it, a broken connection ends the
	// stream.
	Resume bool
}

// StreamRun is a stream in progress.
type StreamRun interface {
	// Stats is what the receiver has seen so far.
	Stats() StreamStats
	// Wait returns when the stream has ended, with what arrived, and why
	// it did not complete, or ctx's cause.
	Wait(ctx context.Context) (StreamStats, error)
	// Close stops the stream and waits for its goroutines. Idempotent.
	Close() error
}

// StreamStats is what a stream's receiver saw.
type StreamStats struct {
	// Received counts bytes accepted in order: their SHA-256 covers them.
	Received int64
	// Lost counts bytes skipped (a frame beyond what had arrived, or the
	// stream's end never reached); Duplicated bytes that arrived twice;
	// Corrupted bytes in frames whose SHA-256 did not match.
	Lost, Duplicated, Corrupted int64
	// Reconnects counts connections after the first.
	Reconnects int
	// MaxStall is the longest time without a byte arriving, and StallAt
	// when it ended, from the stream's start.
	MaxStall, StallAt time.Duration
	// Done: the receiver has every byte and the sender's SHA-256 of the
	// whole stream matched the receiver's (SHAOK).
	Done, SHAOK bool
	// Elapsed is from the stream's start to the last byte, or to now.
	Elapsed time.Duration
}

// Stream is a stream step: bytes over TCP through the overlay while a
// block of steps (the fault) runs.
type Stream struct {
	From     string          `yaml:"from" required:"true" doc:"The sending node."`
	To       string          `yaml:"to" required:"true" doc:"The receiving node."`
	Bytes    strictyaml.Size `yaml:"bytes" required:"true" doc:"How much to send in all." example:"4MiB"`
	Rate     topology.Rate   `yaml:"rate" doc:"Pace the sender at this rate, so the stream lasts through the block. If omitted, as fast as the path goes." example:"2Mbit"`
	Through  []Step          `yaml:"through" required:"true" doc:"The steps run while the stream flows (the fault), in order. Bytes must arrive both before the first and after the last, or the step fails: it did not run through."`
	Resume   bool            `yaml:"resume" doc:"After the TCP connection breaks, reconnect and resume at the offset the receiver has checked, as an application that keeps its progress does. A node that restarts loses its sockets, so a stream from or to it needs this. If false, the one connection must carry every byte."`
	Within   time.Duration   `yaml:"within" min:"10ms" max:"24h" doc:"Bound on the whole step, block included. If zero, 2m."`
	MaxStall time.Duration   `yaml:"max_stall" max:"24h" doc:"Fail if no byte arrives for longer than this. If zero, no bound (the stall is still reported)."`
}

func (a *Stream) check(k *checker, path string) {
	k.pair(path, a.From, a.To)
	if a.Bytes <= 0 {
		k.errorf(path+".bytes", "", "nothing to send")
	}
	if !a.Resume {
		for i := range a.Through {
			if who := restarts(&a.Through[i], k.plan, a.From, a.To); who != "" {
				k.errorf(fmt.Sprintf("%s.through[%d]", path, i+1), "set resume: true: the application then resumes at the receiver's offset",
					"node %s stops or restarts during the stream and its sockets die with it, so one connection cannot carry every byte", who)
			}
		}
	}
	was := map[string]bool{a.From: k.running[a.From], a.To: k.running[a.To]}
	k.inline(path+".through", a.Through)
	for _, name := range []string{a.From, a.To} {
		if was[name] && !k.running[name] {
			k.errorf(path+".through", "start it again within the block", "node %s is not running when the block ends", name)
		}
	}
}

// restarts returns which of from and to step s stops or restarts, or "".
func restarts(s *Step, p *topology.Plan, from, to string) string {
	var t *Target
	switch _, a := s.Action(); v := a.(type) {
	case *Restart:
		t = (*Target)(v)
	case *Stop:
		t = (*Target)(v)
	default:
		return ""
	}
	if t.Node == "" {
		return ""
	}
	for _, n := range p.Group(t.Node) {
		if n.Name == from || n.Name == to {
			return n.Name
		}
	}
	return ""
}

// inline checks a block run once, inline (through), like repeat's steps.
func (k *checker) inline(path string, steps []Step) {
	if len(steps) == 0 {
		k.errorf(path, "name the fault, e.g. - restart: {service: relay}", "the block has no steps")
		return
	}
	for i := range steps {
		p := fmt.Sprintf("%s[%d]", path, i+1)
		if steps[i].Background != "" {
			k.errorf(p+".background", "leave background out: the block runs while the stream does", "a step in a block cannot run in the background")
			continue
		}
		k.step(p, &steps[i])
	}
}

// Describe implements Action.
func (a *Stream) Describe() string {
	var what []string
	for i := range a.Through {
		if _, act := a.Through[i].Action(); act != nil {
			what = append(what, act.Describe())
		}
	}
	return fmt.Sprintf("stream %v %s → %s through %s", a.Bytes, a.From, a.To, strings.Join(what, ", "))
}

// Run implements Action.
func (a *Stream) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, a.Within, 2*time.Minute)
	defer cancel()
	s, err := env.StartStream(ctx, StreamSpec{From: a.From, To: a.To, Bytes: int64(a.Bytes), Rate: float64(a.Rate), Resume: a.Resume})
	if err != nil {
		return "", nil, fmt.Errorf("start the stream %s → %s: %w", a.From, a.To, err)
	}
	defer s.Close()
	if err := waitFlowing(ctx, s); err != nil {
		return "", nil, err
	}
	before := s.Stats()
	blockErr := runBlock(ctx, env, a.Through, "through")
	after := s.Stats()
	if blockErr != nil {
		_ = s.Close() // the step has failed: no need to wait for the rest
	}
	st, err := s.Wait(ctx)
	detail, metrics := streamReport(st, before, after)
	switch {
	case blockErr != nil:
		return detail, metrics, fmt.Errorf("during the stream: %w", blockErr)
	case err != nil:
		return detail, metrics, fmt.Errorf("%s: %w", detail, err)
	}
	return detail, metrics, a.verdict(st, after, detail)
}

// verdict is what a completed stream must show: every byte once, intact,
// some of them after the block, and no stall above the bound.
func (a *Stream) verdict(st, after StreamStats, detail string) error {
	var bad []string
	if !st.Done || !st.SHAOK {
		bad = append(bad, "the stream's SHA-256 did not match")
	}
	if st.Lost+st.Duplicated+st.Corrupted > 0 {
		bad = append(bad, fmt.Sprintf("%d bytes lost, %d duplicated, %d corrupted", st.Lost, st.Duplicated, st.Corrupted))
	}
	if after.Done {
		bad = append(bad, "every byte had arrived before the block ended, so the stream did not run through it (send more bytes or lower rate)")
	}
	if a.MaxStall > 0 && st.MaxStall > a.MaxStall {
		bad = append(bad, fmt.Sprintf("stalled %s, more than max_stall %s", FormatDuration(st.MaxStall), a.MaxStall))
	}
	if !a.Resume && st.Reconnects > 0 {
		bad = append(bad, fmt.Sprintf("%d reconnects without resume", st.Reconnects))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: %s", detail, strings.Join(bad, "; "))
	}
	return nil
}

// waitFlowing waits until the stream has carried a first byte, so the
// block runs through a flowing stream.
func waitFlowing(ctx context.Context, s StreamRun) error {
	for {
		st := s.Stats()
		if st.Received > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no byte arrived before the block: %w", context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// streamReport is a stream's detail line and metrics.
func streamReport(st, before, after StreamStats) (string, []report.Metric) {
	sha := "SHA-256 ok"
	if !st.Done || !st.SHAOK {
		sha = "SHA-256 not matched"
	}
	detail := fmt.Sprintf("%d bytes in %s (%d before the block, %d during it, %d after), %s; lost %d, duplicated %d, corrupted %d; longest stall %s at %s; %d reconnects",
		st.Received, FormatDuration(st.Elapsed), before.Received, after.Received-before.Received, st.Received-after.Received, sha,
		st.Lost, st.Duplicated, st.Corrupted, FormatDuration(st.MaxStall), FormatDuration(st.StallAt), st.Reconnects)
	metrics := []report.Metric{
		{Name: "bytes_lost", Value: float64(st.Lost), Unit: "B"},
		{Name: "bytes_duplicated", Value: float64(st.Duplicated), Unit: "B"},
		{Name: "bytes_corrupted", Value: float64(st.Corrupted), Unit: "B"},
		{Name: "max_stall", Value: float64(st.MaxStall) / 1e6, Unit: "ms"},
		{Name: "reconnects", Value: float64(st.Reconnects)},
	}
	if st.Elapsed > 0 {
		metrics = append(metrics, report.Metric{Name: "throughput", Value: float64(st.Received) * 8 / st.Elapsed.Seconds() / 1e6, Unit: "Mbit/s"})
	}
	return detail, slices.Clip(metrics)
}
