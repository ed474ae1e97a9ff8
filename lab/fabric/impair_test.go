package fabric

import (
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/link"
)

// medianPing pings dst n times and returns the median round trip.
func medianPing(t *testing.T, h *Host, dst netip.Addr, n int) time.Duration {
	t.Helper()
	var rtts []time.Duration
	for range n {
		rtt, err := h.Ping(ctxT(t, 2*time.Second), dst)
		require.NoError(t, err)
		rtts = append(rtts, rtt)
	}
	slices.Sort(rtts)
	return rtts[n/2]
}

// TestImpairedLatency adds delay to one, then four link directions, and
// takes part of it away again: each change shows in the very next ping.
func TestImpairedLatency(t *testing.T) {
	byClock(t, impairedLatencyVirtual, impairedLatencyRealTime)
}

// impairedLatencyVirtual: in virtual time an unimpaired ping takes no time
// at all, so every round trip is exactly the sum of the delays on its path.
func impairedLatencyVirtual(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "full-cone"), 1)
	h := s.hosts[0]
	ifc := h.FabricInterfaces()[0]
	ping := func() time.Duration {
		t.Helper()
		rtt, err := h.Ping(ctxT(t, 2*time.Second), serverIP)
		require.NoError(t, err)
		return rtt
	}
	assert.Zero(t, ping(), "unimpaired")

	require.NoError(t, ifc.SetImpairments(Egress, link.Impairments{Latency: 20 * time.Millisecond}))
	assert.Equal(t, 20*time.Millisecond, ping(), "20ms on one link direction")

	require.NoError(t, ifc.SetImpairments(Egress, link.Impairments{Latency: 15 * time.Millisecond}))
	require.NoError(t, ifc.SetImpairments(Ingress, link.Impairments{Latency: 15 * time.Millisecond}))
	require.NoError(t, s.router.Uplink().SetImpairments(Egress, link.Impairments{Latency: 5 * time.Millisecond}))
	require.NoError(t, s.router.Uplink().SetImpairments(Ingress, link.Impairments{Latency: 5 * time.Millisecond}))
	assert.Equal(t, 40*time.Millisecond, ping(), "15+15 on the host's link, 5+5 on the router's uplink")

	require.NoError(t, ifc.SetImpairments(Egress, link.Impairments{}))
	require.NoError(t, ifc.SetImpairments(Ingress, link.Impairments{}))
	assert.Equal(t, 10*time.Millisecond, ping(), "after removing the host's delay")
}

// impairedLatencyRealTime measures the same on the wall clock, where one
// late timer wake-up on a loaded machine can spoil a median: it compares
// medians against a baseline, retried.
func impairedLatencyRealTime(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "full-cone"), 1)
	h := s.hosts[0]
	base := medianPing(t, h, serverIP, 15)
	ifc := h.FabricInterfaces()[0]

	// One impaired direction of one link: the tolerance, 1ms.
	require.NoError(t, ifc.SetImpairments(Egress, link.Impairments{Latency: 20 * time.Millisecond}))
	// On a loaded 2-core machine one late timer wake-up can spoil a
	// median, so each measurement below is retried (twice at most)
	// before it counts as wrong.
	var got time.Duration
	for try := 1; ; try++ {
		got = medianPing(t, h, serverIP, 15)
		t.Logf("baseline %v, 20ms on one link: %v (error %v)", base, got, got-base-20*time.Millisecond)
		if d := got - base - 20*time.Millisecond; d.Abs() <= time.Millisecond || try == 3 {
			break
		}
	}
	assert.InDelta(t, float64(20*time.Millisecond), float64(got-base), float64(time.Millisecond), "added latency")

	// Both directions of two links (host and router uplink): 40ms more,
	// each of four delays within its 1ms. Changing impairments takes
	// effect at once.
	require.NoError(t, ifc.SetImpairments(Egress, link.Impairments{Latency: 15 * time.Millisecond}))
	require.NoError(t, ifc.SetImpairments(Ingress, link.Impairments{Latency: 15 * time.Millisecond}))
	require.NoError(t, s.router.Uplink().SetImpairments(Egress, link.Impairments{Latency: 5 * time.Millisecond}))
	require.NoError(t, s.router.Uplink().SetImpairments(Ingress, link.Impairments{Latency: 5 * time.Millisecond}))
	for try := 1; ; try++ {
		got = medianPing(t, h, serverIP, 15)
		t.Logf("40ms over four link directions: %v (error %v)", got, got-base-40*time.Millisecond)
		if d := got - base - 40*time.Millisecond; d.Abs() <= 4*time.Millisecond || try == 3 {
			break
		}
	}
	assert.InDelta(t, float64(40*time.Millisecond), float64(got-base), float64(4*time.Millisecond), "added latency")

	require.NoError(t, ifc.SetImpairments(Egress, link.Impairments{}))
	require.NoError(t, ifc.SetImpairments(Ingress, link.Impairments{}))
	for try := 1; ; try++ {
		got = medianPing(t, h, serverIP, 9)
		if d := got - base - 10*time.Millisecond; d.Abs() <= 2*time.Millisecond || try == 3 {
			break
		}
	}
	assert.InDelta(t, float64(10*time.Millisecond), float64(got-base), float64(2*time.Millisecond), "after removing the host's delay")
}

// TestImpairedLoss sends 10000 datagrams over a link losing 10%: every
// datagram that does not arrive was dropped by the loss model. In virtual
// time the receiver always keeps up (it runs before the clock moves on), so
// that holds exactly; on the wall clock the sender pauses to let it.
func TestImpairedLoss(t *testing.T) {
	byClock(t, impairedLoss, impairedLoss)
}

func impairedLoss(t *testing.T) {
	w := newWorld(t, Config{Seed: 42})
	s := w.addSite(t, profile(t, "full-cone"), 1)
	ctx := ctxT(t, 30*time.Second)
	sink, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:9000")
	require.NoError(t, err)
	defer sink.Close()
	got := make(chan int)
	go func() {
		n := 0
		buf := make([]byte, 2048)
		for {
			_ = sink.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			if _, _, err := sink.ReadFrom(buf); err != nil {
				got <- n
				return
			}
			n++
		}
	}()
	ifc := s.hosts[0].FabricInterfaces()[0]
	require.NoError(t, ifc.SetImpairments(Egress, link.Impairments{Loss: 0.10}))
	c, err := s.hosts[0].Dial(ctx, "udp4", "203.0.113.100:9000")
	require.NoError(t, err)
	defer c.Close()
	const total = 10000
	msg := make([]byte, 100)
	for i := range total {
		_, err := c.Write(msg)
		require.NoError(t, err)
		if i%200 == 199 {
			time.Sleep(time.Millisecond) // let the receiver keep up: only the link may drop
		}
	}
	received := <-got
	st := ifc.LinkStats(Egress)
	lossRate := 1 - float64(received)/total
	t.Logf("sent %d, received %d, loss %.2f%%, link stats %+v", total, received, 100*lossRate, st)
	assert.InDelta(t, 0.10, lossRate, 0.02, "measured loss")
	assert.Equal(t, uint64(total-received), st.DroppedLoss, "every missing datagram was dropped by the loss model")
}

// TestImpairedBandwidth moves 6 MiB of TCP through a 40 Mbit/s uplink.
func TestImpairedBandwidth(t *testing.T) {
	byClock(t, impairedBandwidth, impairedBandwidth)
}

func impairedBandwidth(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "full-cone"), 1)
	ctx := ctxT(t, 30*time.Second)
	const rate = 40e6 // bit/s
	require.NoError(t, s.router.Uplink().SetImpairments(Egress, link.Impairments{Rate: rate}))
	l, err := w.server.Listen(ctx, "tcp4", "203.0.113.100:5001")
	require.NoError(t, err)
	defer l.Close()
	done := make(chan time.Duration, 1)
	const size = 6 << 20
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- 0
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		// Time from the first byte, so the handshake does not count.
		if _, err := io.ReadAtLeast(c, buf, 1); err != nil {
			done <- 0
			return
		}
		start := time.Now()
		_, _ = io.CopyBuffer(io.Discard, c, buf)
		done <- time.Since(start)
	}()
	c, err := s.hosts[0].Dial(ctx, "tcp4", "203.0.113.100:5001")
	require.NoError(t, err)
	_, err = c.Write(make([]byte, size))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	elapsed := <-done
	require.NotZero(t, elapsed)
	// Each 1500-byte packet carries 1448 bytes of payload (20 IP + 32 TCP
	// with timestamps) in a 1514-byte frame: the goodput ceiling.
	ceiling := rate * 1448 / 1514
	goodput := float64(size*8) / elapsed.Seconds()
	t.Logf("goodput %.1f Mbit/s, ceiling %.1f Mbit/s (%.1f%%)", goodput/1e6, ceiling/1e6, 100*goodput/ceiling)
	// The shaper holds for TCP too: never above the configured rate. How
	// close TCP gets depends, on the wall clock, on CPU (gVisor, the race
	// detector, parallel test packages) and, in virtual time, on gVisor's
	// receive-buffer tuning (docs/VIRTUAL_TIME.md: about 83% here), so
	// below only progress is checked; the shaper's accuracy is measured
	// exactly with paced UDP in TestImpairedBandwidthUDP.
	assert.Less(t, goodput, 1.05*ceiling, "TCP exceeded the configured rate")
	assert.Greater(t, goodput, 0.1*ceiling, "TCP barely moved")
}

// TestImpairedBandwidthUDP offers UDP at 1.5 times the configured rate and
// measures what arrives: the shaper's rate.
func TestImpairedBandwidthUDP(t *testing.T) {
	byClock(t, impairedBandwidthUDPVirtual, impairedBandwidthUDPRealTime)
}

// impairedBandwidthUDPVirtual: in virtual time the shaped uplink delivers
// back to back, each datagram exactly one frame's serialization time after
// the one before, and tail-drops the excess.
func impairedBandwidthUDPVirtual(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "full-cone"), 1)
	ctx := ctxT(t, 30*time.Second)
	const rate = 20e6 // bit/s
	const payload = 1400
	const frame = ethHeaderLen + 20 + 8 + payload                          // what the shaper counts
	const serialize = time.Duration(frame * 8 * int64(time.Second) / rate) // 576.8 µs
	require.NoError(t, s.router.Uplink().SetImpairments(Egress, link.Impairments{Rate: rate}))
	sink, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:9000")
	require.NoError(t, err)
	defer sink.Close()
	arrivals := make(chan []time.Time)
	go func() {
		var at []time.Time
		buf := make([]byte, 2048)
		for {
			_ = sink.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			if _, _, err := sink.ReadFrom(buf); err != nil {
				arrivals <- at
				return
			}
			at = append(at, time.Now())
		}
	}()
	c, err := s.hosts[0].Dial(ctx, "udp4", "203.0.113.100:9000")
	require.NoError(t, err)
	defer c.Close()
	msg := make([]byte, payload)
	const sent = 1000 // at 1.5 times the rate: 385 ms
	start := time.Now()
	for range sent {
		_, err := c.Write(msg)
		require.NoError(t, err)
		time.Sleep(serialize * 2 / 3)
	}
	at := <-arrivals
	st := s.router.Uplink().LinkStats(Egress)
	t.Logf("configured %.1f Mbit/s: %d of %d datagrams arrived, %d tail-dropped", rate/1e6, len(at), sent, st.DroppedQueue)
	require.NotEmpty(t, at)
	assert.Equal(t, serialize, at[0].Sub(start), "first datagram")
	for i := 1; i < len(at); i++ {
		require.Equal(t, serialize, at[i].Sub(at[i-1]), "gap before datagram %d", i)
	}
	assert.Positive(t, st.DroppedQueue, "the excess was tail-dropped by the bounded queue")
	assert.Equal(t, uint64(sent), uint64(len(at))+st.DroppedQueue, "every datagram delivered or tail-dropped")
}

// impairedBandwidthUDPRealTime measures the rate on the wall clock, within
// 10%: paced sending and the receiver share the CPU with gVisor.
func impairedBandwidthUDPRealTime(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "full-cone"), 1)
	ctx := ctxT(t, 30*time.Second)
	const rate = 20e6 // bit/s
	require.NoError(t, s.router.Uplink().SetImpairments(Egress, link.Impairments{Rate: rate}))
	sink, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:9000")
	require.NoError(t, err)
	defer sink.Close()
	type arrival struct {
		n     int
		first time.Time
		last  time.Time
	}
	got := make(chan arrival)
	go func() {
		var a arrival
		buf := make([]byte, 2048)
		for {
			_ = sink.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			if _, _, err := sink.ReadFrom(buf); err != nil {
				got <- a
				return
			}
			now := time.Now()
			if a.n == 0 {
				a.first = now
			}
			a.last = now
			a.n++
		}
	}()
	c, err := s.hosts[0].Dial(ctx, "udp4", "203.0.113.100:9000")
	require.NoError(t, err)
	defer c.Close()
	const payload = 1400
	frame := float64(ethHeaderLen + 20 + 8 + payload) // what the shaper counts
	offered := 1.5 * rate / (frame * 8)               // datagrams per second
	msg := make([]byte, payload)
	start := time.Now()
	for sent := 0; time.Since(start) < 1500*time.Millisecond; {
		for float64(sent) < offered*time.Since(start).Seconds() {
			_, err := c.Write(msg)
			require.NoError(t, err)
			sent++
		}
		time.Sleep(time.Millisecond)
	}
	a := <-got
	require.Greater(t, a.n, 100)
	measured := float64(a.n-1) * frame * 8 / a.last.Sub(a.first).Seconds()
	st := s.router.Uplink().LinkStats(Egress)
	t.Logf("configured %.1f Mbit/s, measured %.2f Mbit/s over %d datagrams, %d tail-dropped", rate/1e6, measured/1e6, a.n, st.DroppedQueue)
	assert.InEpsilon(t, rate, measured, 0.10, "delivered rate within 10%% of the configured rate")
	assert.Positive(t, st.DroppedQueue, "the excess was tail-dropped by the bounded queue")
}

func TestInterfaceDown(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "full-cone"), 1)
	h := s.hosts[0]
	_, err := h.Ping(ctxT(t, 2*time.Second), serverIP)
	require.NoError(t, err)
	s.router.Uplink().SetDown(true)
	_, err = h.Ping(ctxT(t, 300*time.Millisecond), serverIP)
	require.Error(t, err, "ping through a router whose uplink is down")
	ifcs, err := h.Interfaces()
	require.NoError(t, err)
	assert.NotZero(t, ifcs[1].Flags&net.FlagUp, "the host's own link is still up")
	s.router.Uplink().SetDown(false)
	_, err = h.Ping(ctxT(t, 2*time.Second), serverIP)
	require.NoError(t, err, "ping after the link came back")
	assert.Positive(t, s.router.Uplink().LinkStats(Egress).DroppedDown)
}
