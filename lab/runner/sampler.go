package runner

import (
	"context"
	"sync"
	"time"

	"github.com/latticelab/lattice/lab/report"
)

// Traffic sampling for the report's bytes-per-path charts: the first
// sampledNodes running nodes in plan order, every interval of lab time
// (the clock the scenario runs on), from the same collector assert_metric
// scrapes. A stopped node is not sampled (its line joins across the gap).
// At most maxSamples are kept per node: when a node's series is full,
// every other sample is dropped and that node's interval doubles, so an
// hour's scenario costs the same memory and about log2(hours) times the
// scrapes of a minute's.
const (
	sampledNodes   = 16
	sampleInterval = 250 * time.Millisecond
	maxSamples     = 200
)

// sampler owns the goroutine that samples; stop ends it.
type sampler struct {
	l     *Lab
	stopc chan struct{}
	done  chan struct{}

	mu     sync.Mutex // guards the following fields
	series []nodeSeries
	index  map[string]int
}

// nodeSeries is one node's samples and when the next is due.
type nodeSeries struct {
	report.NodeTraffic
	interval time.Duration
	next     time.Duration // lab time of the next sample
}

// startSampling takes a first sample and samples until stop or ctx ends.
func startSampling(ctx context.Context, l *Lab) *sampler {
	s := &sampler{l: l, stopc: make(chan struct{}), done: make(chan struct{}), index: map[string]int{}}
	s.sample(true)
	go s.loop(ctx)
	return s
}

func (s *sampler) loop(ctx context.Context) {
	defer close(s.done)
	wait := sampleInterval
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.stopc:
			t.Stop()
			return
		case <-t.C:
			wait = s.sample(false)
		}
	}
}

// maxWait bounds the time between two looks at which nodes run, so a node
// started late is sampled soon even when the others' intervals are long.
const maxWait = 4 * time.Second

// sample records the counters of the sampled nodes that are due (all of
// them if force) and returns how long until the next is due.
func (s *sampler) sample(force bool) time.Duration {
	at := s.l.Since()
	wait := maxWait
	s.mu.Lock()
	defer s.mu.Unlock()
	running := s.l.Running()
	for _, name := range running {
		i, ok := s.index[name]
		if !ok {
			if len(s.series) == sampledNodes {
				continue
			}
			i = len(s.series)
			s.index[name] = i
			s.series = append(s.series, nodeSeries{NodeTraffic: report.NodeTraffic{Node: name}, interval: sampleInterval})
		}
		ns := &s.series[i]
		if !force && at < ns.next {
			wait = min(wait, ns.next-at)
			continue
		}
		mfs, err := s.l.gather(name)
		if err != nil {
			s.l.log.Debug("traffic sample", "node", name, "err", err)
			continue
		}
		v := func(path, dir string) uint64 {
			f, _, _ := sumSeries(mfs, "lattice_node_bytes_total", map[string]string{"path": path, "direction": dir})
			return uint64(f)
		}
		ns.Samples = append(ns.Samples, report.TrafficSample{At: at, DirectTx: v("direct", "tx"), DirectRx: v("direct", "rx"),
			RelayTx: v("relay", "tx"), RelayRx: v("relay", "rx")})
		if len(ns.Samples) > maxSamples {
			ns.Samples = thin(ns.Samples)
			ns.interval *= 2
		}
		ns.next = at + ns.interval
		wait = min(wait, ns.interval)
	}
	return max(wait, sampleInterval)
}

// thin keeps every other sample, and the last.
func thin(ss []report.TrafficSample) []report.TrafficSample {
	last := ss[len(ss)-1]
	kept := ss[:0]
	for j := 0; j < len(ss); j += 2 {
		kept = append(kept, ss[j])
	}
	if kept[len(kept)-1] != last {
		kept = append(kept, last)
	}
	return kept
}

// stop ends the sampling with a last sample and returns the series.
func (s *sampler) stop() []report.NodeTraffic {
	close(s.stopc)
	<-s.done
	s.sample(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]report.NodeTraffic, len(s.series))
	for i, ns := range s.series {
		out[i] = ns.NodeTraffic
	}
	return out
}
