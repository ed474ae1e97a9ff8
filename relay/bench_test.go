package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkRelayForward measures one-way relay throughput: client a sends
// b.N 1400-byte packets to client b through a relay, all on netx.OS
// loopback in this process, so the relay, both clients and the crypto of
// both hops share the machine's cores. It reports delivered Gbit/s, the
// share of packets lost on the way (relay queue drops, quic-go's
// datagram receive queue overflowing) and the process's CPU time per
// delivered packet (user and system, both hops and both clients), which
// a loaded machine disturbs less than throughput.
//
// The -1408 variants send MaxDatagramPacket-byte packets, the full-size
// packets of a WireGuard MTU of 1376: the largest that ride a datagram,
// each in one full-size QUIC packet, which quic-go sends in GSO batches.
//
// The sender keeps at most benchWindow packets in flight, as the
// congestion-controlled flows inside a WireGuard tunnel do; packets that
// do not arrive within benchLossTimeout are written off as lost. A blind
// sender only measures how much work the relay wastes on packets it must
// drop anyway.
func BenchmarkRelayForward(b *testing.B) {
	for _, tr := range []string{transportQUIC, transportTCP} {
		b.Run(tr, func(b *testing.B) { benchForward(b, tr, benchPacketSize) })
	}
	for _, tr := range []string{transportQUIC, transportTCP} {
		b.Run(fmt.Sprintf("%s-%d", tr, MaxDatagramPacket), func(b *testing.B) { benchForward(b, tr, MaxDatagramPacket) })
	}
}

const (
	benchPacketSize  = 1400
	benchWindow      = 512
	benchLossTimeout = 20 * time.Millisecond
)

func benchForward(b *testing.B, transport string, size int) {
	s := startServer(b, ServerConfig{PacketRate: -1, QueueLen: 1024})
	tweak := func(c *ClientConfig) { c.Transport = transport; c.QueueLen = 1024; c.RecvQueueLen = 4096 }
	src := connectedClient(b, s, tweak)
	dst := connectedClient(b, s, tweak)
	require.Equal(b, transport, src.Transport())

	// Warm up until the peer id is acknowledged, so the run measures
	// datagrams rather than the stream used before BIND_ACK.
	pkt := make([]byte, size)
	warm := ctxT(b, 5*time.Second)
	for range 100 {
		require.NoError(b, src.Send(dst.Key(), pkt))
		_, _, err := dst.Recv(warm)
		require.NoError(b, err)
	}
	before := s.Stats()

	var (
		got     atomic.Int64
		waiting atomic.Bool
		wake    = make(chan struct{}, 1)
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, _, err := dst.Recv(ctx); err != nil {
				return
			}
			got.Add(1)
			if waiting.Load() {
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}
	}()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	b.SetBytes(int64(size))
	b.ResetTimer()
	start, cpuStart := time.Now(), processCPU(b)
	var writtenOff int64
	for i := range int64(b.N) {
		for i-got.Load()-writtenOff >= benchWindow {
			waiting.Store(true)
			if i-got.Load()-writtenOff < benchWindow {
				waiting.Store(false)
				break
			}
			timer.Reset(benchLossTimeout)
			select {
			case <-wake:
			case <-timer.C:
				writtenOff = i - got.Load() // the window's remainder is lost
			}
			waiting.Store(false)
		}
		if err := src.Send(dst.Key(), pkt); err != nil {
			b.Fatal(err)
		}
	}
	// Wait for the tail: until everything arrived or nothing moved for
	// benchLossTimeout.
	last, idleSince := got.Load(), time.Now()
	for got.Load() < int64(b.N) && time.Since(idleSince) < benchLossTimeout {
		time.Sleep(time.Millisecond)
		if n := got.Load(); n != last {
			last, idleSince = n, time.Now()
		}
	}
	elapsed, cpu := time.Since(start), processCPU(b)-cpuStart
	b.StopTimer()
	cancel()
	<-done

	n := got.Load()
	after := s.Stats()
	b.ReportMetric(float64(n)*float64(size)*8/elapsed.Seconds()/1e9, "Gbit/s")
	if n > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/pkt")
	}
	b.ReportMetric(100*float64(int64(b.N)-n)/float64(b.N), "loss-%")
	if transport == transportQUIC {
		b.ReportMetric(100*float64(after.DatagramFallbacks-before.DatagramFallbacks)/float64(b.N), "stream-%")
	}
	b.Logf("N=%d sent=%d relay-in=%d relay-out=%d relay-drops=%v received=%d recv-dropped=%d",
		b.N, src.Stats().PacketsSent, after.PacketsIn-before.PacketsIn, after.PacketsOut-before.PacketsOut,
		after.Drops, n, dst.Stats().RecvDropped)
}
