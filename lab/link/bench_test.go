package link

import (
	"sync/atomic"
	"testing"
	"time"
)

// benchPipe returns a pipe whose Deliver only counts.
func benchPipe(b *testing.B, im Impairments) (*Pipe, *atomic.Int64) {
	b.Helper()
	var delivered atomic.Int64
	p, err := New(Config{Impairments: im, Deliver: func([]byte) { delivered.Add(1) }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	return p, &delivered
}

// BenchmarkPipeZero is the perfect link: Send calls Deliver directly.
func BenchmarkPipeZero(b *testing.B) {
	p, _ := benchPipe(b, Impairments{})
	pkt := make([]byte, 1400)
	b.ReportAllocs()
	for b.Loop() {
		p.Send(pkt)
	}
}

// BenchmarkPipeLoss decides loss in Send without the scheduler.
func BenchmarkPipeLoss(b *testing.B) {
	p, _ := benchPipe(b, Impairments{Loss: 0.01, MTU: 1500})
	pkt := make([]byte, 1400)
	b.ReportAllocs()
	for b.Loop() {
		p.Send(pkt)
	}
}

// benchScheduled sends b.N packets through the scheduler as fast as
// possible and waits for the last one, reporting packets per second.
func benchScheduled(b *testing.B, im Impairments) {
	p, delivered := benchPipe(b, im)
	pkt := make([]byte, 1400)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p.Send(pkt)
	}
	for delivered.Load() < int64(b.N) {
		time.Sleep(50 * time.Microsecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pps")
}

// BenchmarkPipeLatency runs packets through the scheduler with 1ms latency.
func BenchmarkPipeLatency(b *testing.B) {
	benchScheduled(b, Impairments{Latency: time.Millisecond})
}

// BenchmarkPipeRate runs packets through the bandwidth limiter at a rate
// high enough not to drop (100 Tbit/s) with 1ms latency.
func BenchmarkPipeRate(b *testing.B) {
	benchScheduled(b, Impairments{Latency: time.Millisecond, Rate: 100 * Tbit})
}
