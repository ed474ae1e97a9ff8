package runner

import (
	"context"
	"sync"
	"time"

	"github.com/latticelab/lattice/lab/report"
)

// Traffic sampling for the report's bytes-per-path charts: the first
// sampledNodes nodes of the plan, every interval of lab time (the clock
// the scenario runs on), from the same collector assert_metric scrapes.
// At most maxSamples are kept per node: when a node's series is full,
// every other sample is dropped and the interval doubles, so an hour's
// scenario costs the same memory and about log2(hours) times the scrapes
// of a minute's.
const (
	sampledNodes   = 16
	sampleInterval = 250 * time.Millisecond
	maxSamples     = 400
)

// sampler owns the goroutine that samples; stop ends it.
type sampler struct {
	l     *Lab
	names []string
	stopc chan struct{}
	done  chan struct{}

	mu       sync.Mutex // guards the following fields
	series   []report.NodeTraffic
	interval time.Duration
}

// startSampling takes a first sample and samples until stop or ctx ends.
func startSampling(ctx context.Context, l *Lab) *sampler {
	s := &sampler{l: l, stopc: make(chan struct{}), done: make(chan struct{}), interval: sampleInterval}
	for _, n := range l.plan.Nodes {
		if len(s.names) == sampledNodes {
			break
		}
		s.names = append(s.names, n.Name)
		s.series = append(s.series, report.NodeTraffic{Node: n.Name})
	}
	s.sample()
	go s.loop(ctx)
	return s
}

func (s *sampler) loop(ctx context.Context) {
	defer close(s.done)
	for {
		s.mu.Lock()
		d := s.interval
		s.mu.Unlock()
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.stopc:
			t.Stop()
			return
		case <-t.C:
			s.sample()
		}
	}
}

// sample records every sampled node's counters now.
func (s *sampler) sample() {
	at := s.l.Since()
	got := make([]report.TrafficSample, len(s.names))
	for i, name := range s.names {
		mfs, err := s.l.gather(name)
		if err != nil {
			s.l.log.Debug("traffic sample", "node", name, "err", err)
			continue
		}
		v := func(path, dir string) uint64 {
			f, _, _ := sumSeries(mfs, "lattice_node_bytes_total", map[string]string{"path": path, "direction": dir})
			return uint64(f)
		}
		got[i] = report.TrafficSample{At: at, DirectTx: v("direct", "tx"), DirectRx: v("direct", "rx"),
			RelayTx: v("relay", "tx"), RelayRx: v("relay", "rx")}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.series {
		ss := append(s.series[i].Samples, got[i])
		if len(ss) > maxSamples {
			kept := ss[:0]
			for j := 0; j < len(ss); j += 2 {
				kept = append(kept, ss[j])
			}
			if last := ss[len(ss)-1]; kept[len(kept)-1] != last {
				kept = append(kept, last)
			}
			ss = kept
			if i == 0 {
				s.interval *= 2
			}
		}
		s.series[i].Samples = ss
	}
}

// stop ends the sampling with a last sample and returns the series.
func (s *sampler) stop() []report.NodeTraffic {
	close(s.stopc)
	<-s.done
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.series
}
