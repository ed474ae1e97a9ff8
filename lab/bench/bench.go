// Package bench runs lattice-lab's benchmarks on the emulation fabric (the
// data path over direct and relayed pairs, the time a new pair takes to
// connect and to go direct, and a 100-node mesh), compares them with a
// saved baseline and draws them as SVG.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latticelab/lattice/lab/runner"
	"github.com/latticelab/lattice/lab/topology"
)

// Metric is one measured figure.
type Metric struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Better is "higher" or "lower": which way is an improvement.
	Better string `json:"better"`
	Note   string `json:"note,omitempty"`
}

// Report is one bench run.
type Report struct {
	Date time.Time `json:"date"`
	Go   string    `json:"go"`
	CPUs int       `json:"cpus"`
	// Load is the machine's 1-minute load average when the run began
	// and when it ended (0 where /proc/loadavg cannot be read): above
	// CPUs, other work shared the cores and the figures measure it too.
	Load    [2]float64 `json:"load,omitempty"`
	Metrics []Metric   `json:"metrics"`
}

// Topologies are the plans the benchmarks run on.
type Topologies struct {
	// Pair has nodes Direct[0]↔Direct[1] going direct and Relay[0]↔Relay[1]
	// relayed (the quickstart: laptop, tablet, desktop).
	Pair          *topology.Plan
	Direct, Relay [2]string
	// Scale is the many-node topology.
	Scale *topology.Plan
}

// Options tune Run.
type Options struct {
	// Only names the benchmarks to run (datapath, connect, scale); all if
	// empty.
	Only []string
	// Bytes is the data path transfer size. If zero, 64 MiB.
	Bytes int64
	// Runs is how many times connect repeats. If zero, 5.
	Runs     int
	Progress func(string)
	// AtScale, if set, is called once while the scale bench's lab is
	// still up, at its fullest: after the full mesh, or when waiting for
	// it failed. A heap profile taken here shows what the nodes hold.
	AtScale func()
}

// Run runs the benchmarks.
func Run(ctx context.Context, t Topologies, opt Options) (*Report, error) {
	if opt.Bytes == 0 {
		opt.Bytes = 64 << 20
	}
	if opt.Runs < 0 {
		return nil, fmt.Errorf("bench: %d runs; want at least 1 (0 for the default, 5)", opt.Runs)
	}
	if opt.Runs == 0 {
		opt.Runs = 5
	}
	var sayMu sync.Mutex // scale says from its memory ticker too
	say := func(format string, args ...any) {
		if opt.Progress != nil {
			sayMu.Lock()
			defer sayMu.Unlock()
			opt.Progress(fmt.Sprintf(format, args...))
		}
	}
	rep := &Report{Date: time.Now().UTC(), Go: runtime.Version(), CPUs: runtime.NumCPU()}
	rep.Load[0] = readLoadAverage()
	busy := func(when string, load float64) {
		if load > float64(rep.CPUs) {
			say("warning: load average %.1f on %d cores %s: other work shares the machine, and these figures measure it too (compare with a baseline taken beside the same work, or on a quiet machine)", load, rep.CPUs, when)
		}
	}
	busy("at the start", rep.Load[0])
	defer func() {
		rep.Load[1] = readLoadAverage()
		busy("at the end", rep.Load[1])
	}()
	want := func(name string) bool { return len(opt.Only) == 0 || slices.Contains(opt.Only, name) }
	if want("datapath") {
		say("datapath: %d MiB over a direct pair, a relayed pair, and the direct pair relayed", opt.Bytes>>20)
		ms, err := dataPath(ctx, t, opt.Bytes)
		if err != nil {
			return rep, fmt.Errorf("datapath: %w", err)
		}
		rep.Metrics = append(rep.Metrics, ms...)
	}
	if want("connect") {
		say("connect: %d fresh pairs, time to first byte and to a direct path", opt.Runs)
		ms, err := connect(ctx, t, opt.Runs)
		if err != nil {
			return rep, fmt.Errorf("connect: %w", err)
		}
		rep.Metrics = append(rep.Metrics, ms...)
	}
	if want("scale") && t.Scale != nil {
		say("scale: %d nodes to a full mesh", len(t.Scale.Nodes))
		ms, err := scale(ctx, t.Scale, say, opt.AtScale)
		if err != nil {
			return rep, fmt.Errorf("scale: %w", err)
		}
		rep.Metrics = append(rep.Metrics, ms...)
	}
	for _, m := range rep.Metrics {
		say("  %-28s %10.1f %s", m.Name, m.Value, m.Unit)
	}
	return rep, nil
}

func dataPath(ctx context.Context, t Topologies, size int64) ([]Metric, error) {
	l, err := runner.Up(ctx, runner.Config{Plan: t.Pair})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	var out []Metric
	for _, p := range []struct {
		name string
		pair [2]string
		path string
		// cut blackholes the pair's UDP first, so the direct pair
		// falls back to the relay: the same two nodes, the same round
		// trips to each other, over the other path.
		cut  bool
		note string
	}{
		{name: "direct", pair: t.Direct, path: "direct"},
		{name: "relay", pair: t.Relay, path: "relay"},
		{name: "direct_pair_relayed", pair: t.Direct, path: "relay", cut: true,
			note: "; UDP between them blackholed, so the same pair as datapath_direct: direct ≥ this is the direct path's gain"},
	} {
		if p.cut {
			if err := l.Blackhole(p.pair[0], p.pair[1], true); err != nil {
				return nil, fmt.Errorf("%s: cut the pair's UDP: %w", p.name, err)
			}
			defer func() { _ = l.Blackhole(p.pair[0], p.pair[1], false) }()
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := l.WaitPath(wctx, p.pair[0], p.pair[1], p.path)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s pair: %w", p.name, err)
		}
		tctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		d, err := l.Transfer(tctx, p.pair[0], p.pair[1], size)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s transfer: %w", p.name, err)
		}
		out = append(out, Metric{Name: "datapath_" + p.name, Value: float64(size) * 8 / d.Seconds() / 1e6, Unit: "Mbit/s", Better: "higher",
			Note: fmt.Sprintf("%s → %s, %d MiB, TCP over WireGuard over the %s path%s", p.pair[0], p.pair[1], size>>20, p.path, p.note)})
	}
	return out, nil
}

func connect(ctx context.Context, t Topologies, runs int) ([]Metric, error) {
	var first, started, afterUp, direct []time.Duration
	a, b := t.Direct[0], t.Direct[1]
	for range runs {
		c, err := connectOnce(ctx, t, "", nil)
		if err != nil {
			return nil, err
		}
		first, started, direct = append(first, c.firstByte), append(started, c.started), append(direct, c.direct)
		afterUp = append(afterUp, c.firstByte-c.started)
	}
	return []Metric{
		{Name: "connect_first_byte", Value: median(first), Unit: "ms", Better: "lower",
			Note: fmt.Sprintf("median of %d: from starting %s (with %s up) to its first answered overlay ping", runs, b, a)},
		{Name: "connect_node_start", Value: median(started), Unit: "ms", Better: "lower",
			Note: fmt.Sprintf("median of %d: the part of connect_first_byte %s took to start (registered, relay, control session, peers)", runs, b)},
		{Name: "connect_first_byte_up", Value: median(afterUp), Unit: "ms", Better: "lower",
			Note: fmt.Sprintf("median of %d: the rest of connect_first_byte, from %s's start returning to the ping answered (the overlay's own part: the peer learnt, the handshake, the ping)", runs, b)},
		{Name: "connect_direct", Value: median(direct), Unit: "ms", Better: "lower",
			Note: fmt.Sprintf("median of %d: from both being up to the direct path", runs)},
	}, nil
}

// connectTimes are one connect run's figures, each from the joining
// node's start.
type connectTimes struct {
	started   time.Duration // its start returned: registered, relay, session, peers
	firstByte time.Duration // the bench's ping answered
	direct    time.Duration // the direct path (Lab.TimeToDirect)
}

// connectOnce is one connect run on a fresh lab: Direct[1] starts while
// Direct[0] is up, and Direct[0] pings it. stateDir is the lab's
// (runner.Config.StateDir: it may hold the nodes' identities); inspect,
// if set, sees the lab before it closes.
func connectOnce(ctx context.Context, t Topologies, stateDir string, inspect func(*runner.Lab)) (connectTimes, error) {
	var c connectTimes
	a, b := t.Direct[0], t.Direct[1]
	l, err := runner.Up(ctx, runner.Config{Plan: t.Pair, Nodes: []string{a}, StateDir: stateDir})
	if err != nil {
		return c, err
	}
	start := time.Now()
	err = l.StartNodes(ctx, b)
	c.started = time.Since(start)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err = l.Ping(pctx, a, b, 1)
		cancel()
	}
	c.firstByte = time.Since(start)
	if err == nil {
		dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		c.direct, err = l.TimeToDirect(dctx, a, b)
		cancel()
	}
	if err == nil && inspect != nil {
		inspect(l)
	}
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	return c, err
}

func scale(ctx context.Context, p *topology.Plan, say func(string, ...any), atScale func()) ([]Metric, error) {
	before := peakRSS()
	start := time.Now()
	// A line per node as it comes up, and the memory every 10 s: a run
	// of a thousand nodes takes minutes, and where it stalls or grows is
	// what it is run for.
	stopMem := every(10*time.Second, func() {
		say("  %s: %d MiB resident, peak %d MiB", time.Since(start).Round(time.Second), residentRSS()>>20, peakRSS()>>20)
	})
	defer stopMem()
	l, err := runner.Up(ctx, runner.Config{Plan: p, Progress: func(s string) { say("  %s", s) }})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	up := time.Since(start)
	say("  %d nodes up in %.1fs", len(p.Nodes), up.Seconds())
	mctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	_, err = l.WaitMesh(mctx)
	if err != nil {
		if atScale != nil {
			atScale()
		}
		return nil, err
	}
	mesh := time.Since(start)
	say("  full mesh in %.1fs; each node pings %d peers", mesh.Seconds(), scalePings)
	err = pingRandomPeers(ctx, l, p, say)
	if atScale != nil {
		atScale() // at the peak: every pinged pair awake
	}
	if err != nil {
		return nil, err
	}
	pinged := time.Since(start)
	peak := peakRSS()
	return []Metric{
		{Name: "scale_nodes_up", Value: up.Seconds(), Unit: "s", Better: "lower", Note: fmt.Sprintf("%d nodes registered (16 at a time from 32 nodes)", len(p.Nodes))},
		{Name: "scale_full_mesh", Value: mesh.Seconds(), Unit: "s", Better: "lower", Note: "from the first node's start until every pair has a handshake"},
		{Name: "scale_pinged", Value: pinged.Seconds(), Unit: "s", Better: "lower", Note: fmt.Sprintf("from the first node's start until each node had answers from %d random peers", scalePings)},
		{Name: "scale_peak_rss", Value: float64(max(peak, before)) / (1 << 20), Unit: "MiB", Better: "lower", Note: "the process's peak resident memory (VmHWM)"},
	}, nil
}

// scalePings is how many random peers each node of the scale bench pings
// (issue 22: all up and each node pings 10 random peers); pingParallel
// bounds the pings in flight.
const (
	scalePings   = 10
	pingParallel = 64
)

// pingRandomPeers has each node ping scalePings other nodes, picked by
// the topology's seed, and fails naming the pairs that got no answer.
// Each ping wakes a lazy pair: its first answer comes through the relay
// while the pair negotiates its direct path.
func pingRandomPeers(ctx context.Context, l *runner.Lab, p *topology.Plan, say func(string, ...any)) error {
	names := make([]string, 0, len(p.Nodes))
	for _, n := range p.Nodes {
		names = append(names, n.Name)
	}
	if len(names) < 2 {
		return nil
	}
	rng := mrand.New(mrand.NewPCG(uint64(p.Seed), scalePings)) //nolint:gosec // seeded: the same peers every run
	type pair struct{ from, to string }
	var pairs []pair
	for i, from := range names {
		for _, j := range rng.Perm(len(names) - 1)[:min(scalePings, len(names)-1)] {
			if j >= i {
				j++ // skip the node itself
			}
			pairs = append(pairs, pair{from, names[j]})
		}
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
		done   int
	)
	slots := make(chan struct{}, pingParallel)
	for _, pr := range pairs {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := l.Ping(pctx, pr.from, pr.to, 1)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s → %s: %v", pr.from, pr.to, err))
			}
			if done++; done%1000 == 0 {
				say("  %d of %d pings answered or failed", done, len(pairs))
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		slices.Sort(failed)
		return fmt.Errorf("%d of %d pings unanswered, first: %s", len(failed), len(pairs), failed[0])
	}
	return nil
}

func median(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2]) / 1e6
}

// every calls f every d until the returned stop is called; stop waits
// for a call in progress.
func every(d time.Duration, f func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// peakRSS is the process's high-water resident memory, from
// /proc/self/status (0 where there is none).
func peakRSS() int64 { return procStatus("VmHWM:") }

// residentRSS is the process's resident memory now.
func residentRSS() int64 { return procStatus("VmRSS:") }

// readLoadAverage is loadAverage; tests replace it.
var readLoadAverage = loadAverage

// loadAverage is the machine's 1-minute load average, or 0 where it
// cannot be read.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	l, _ := parseLoadAverage(string(b))
	return l
}

// parseLoadAverage reads the first field of /proc/loadavg ("0.52 0.58
// 0.59 1/257 3621").
func parseLoadAverage(s string) (float64, error) {
	f, _, _ := strings.Cut(strings.TrimSpace(s), " ")
	l, err := strconv.ParseFloat(f, 64)
	if err != nil || l < 0 || l != l || l > 1e9 {
		return 0, fmt.Errorf("/proc/loadavg: %q is not a load average", f)
	}
	return l, nil
}

// procStatus reads a kB field of /proc/self/status, in bytes (0 where
// there is none).
func procStatus(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// WriteJSON writes a report.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Change is one metric against its baseline.
type Change struct {
	Metric     Metric
	Baseline   float64
	Ratio      float64 // new / baseline
	Regression bool
}

// Compare sets each metric against the baseline's: a regression is a
// change for the worse by more than tolerance (0.2 = 20%).
func Compare(cur, base *Report, tolerance float64) []Change {
	var out []Change
	for _, m := range cur.Metrics {
		i := slices.IndexFunc(base.Metrics, func(b Metric) bool { return b.Name == m.Name })
		if i < 0 || base.Metrics[i].Value == 0 {
			continue
		}
		b := base.Metrics[i].Value
		c := Change{Metric: m, Baseline: b, Ratio: m.Value / b}
		if m.Better == "higher" {
			c.Regression = c.Ratio < 1-tolerance
		} else {
			c.Regression = c.Ratio > 1+tolerance
		}
		out = append(out, c)
	}
	return out
}
