package link

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// In a synctest bubble the pipe follows the bubble's clock: a delayed packet
// arrives after exactly its latency of bubble time, however long that is in
// wall time, and packets sent later keep their own exact delays.
func TestLatencyVirtualTime(t *testing.T) {
	tests := []struct {
		name string
		im   Impairments
		gaps []time.Duration // bubble time between sends
		want []time.Duration // delivery time of each packet, from the first send
	}{
		{
			name: "one packet",
			im:   Impairments{Latency: 100 * time.Millisecond},
			gaps: []time.Duration{0},
			want: []time.Duration{100 * time.Millisecond},
		},
		{
			name: "spaced packets",
			im:   Impairments{Latency: 100 * time.Millisecond},
			gaps: []time.Duration{0, 30 * time.Millisecond, 250 * time.Millisecond},
			want: []time.Duration{100 * time.Millisecond, 130 * time.Millisecond, 380 * time.Millisecond},
		},
		{
			name: "an hour",
			im:   Impairments{Latency: time.Hour},
			gaps: []time.Duration{0, time.Minute},
			want: []time.Duration{time.Hour, time.Hour + time.Minute},
		},
		{
			name: "rate",
			// 1000 bytes at 80 kbit/s leave in 100 ms; the second
			// waits behind the first.
			im:   Impairments{Rate: 80_000, QueueBytes: 10_000},
			gaps: []time.Duration{0, 0},
			want: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				got := make(chan time.Time, len(tt.gaps))
				p, err := New(Config{Impairments: tt.im, Deliver: func([]byte) { got <- time.Now() }})
				require.NoError(t, err)
				defer p.Close()

				start := time.Now()
				for i, gap := range tt.gaps {
					time.Sleep(gap)
					p.Send(packet(uint32(i), 1000))
				}
				for i, want := range tt.want {
					at := <-got
					assert.Equal(t, want, at.Sub(start), "packet %d", i)
				}
			})
		})
	}
}

// sendPaced sends n size-byte packets, numbered from 0, one every gap of
// bubble time, and returns when each was sent.
func sendPaced(p *Pipe, n, size int, gap time.Duration) []time.Time {
	sent := make([]time.Time, n)
	for i := range n {
		sent[i] = time.Now()
		p.Send(packet(uint32(i), size))
		time.Sleep(gap)
	}
	return sent
}

// drain lets the bubble's clock run on by d, past the last delivery, and
// returns the sink's deliveries.
func drain(s *sink, d time.Duration) []delivery {
	time.Sleep(d)
	synctest.Wait()
	return s.deliveries()
}

// delays returns each delivery's delay from its packet's send time, in
// delivery order, after checking every packet arrived exactly once.
func delays(t *testing.T, sent []time.Time, got []delivery) []time.Duration {
	t.Helper()
	require.Len(t, got, len(sent))
	seen := make([]bool, len(sent))
	out := make([]time.Duration, len(got))
	for i, d := range got {
		require.False(t, seen[d.seq], "packet %d delivered twice", d.seq)
		seen[d.seq] = true
		out[i] = d.at.Sub(sent[d.seq])
	}
	return out
}

// Every packet takes exactly its latency, short ones included: a fresh
// pipe's scheduler must not deliver early in a bubble.
func TestLatencyExact(t *testing.T) {
	for _, latency := range []time.Duration{time.Nanosecond, 300 * time.Microsecond, 20 * time.Millisecond} {
		t.Run(latency.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, s := newTestPipe(t, Impairments{Latency: latency}, 1)
				sent := sendPaced(p, 300, 200, 500*time.Microsecond)
				got := drain(s, latency)
				for i, d := range delays(t, sent, got) {
					require.Equal(t, uint32(i), got[i].seq, "delivery %d out of order", i)
					require.Equal(t, latency, d, "packet %d", i)
				}
			})
		})
	}
}

// Jitter draws each delay from [Latency-Jitter, Latency+Jitter]; keeping
// order holds a packet behind an earlier one that drew more, which never
// pushes it past Latency+Jitter. In virtual time both ends are exact, and a
// seed replays to the nanosecond.
func TestJitter(t *testing.T) {
	const latency, jitter = 10 * time.Millisecond, 5 * time.Millisecond
	run := func(seed uint64) (ds []time.Duration) {
		synctest.Test(t, func(t *testing.T) {
			p, s := newTestPipe(t, Impairments{Latency: latency, Jitter: jitter}, seed)
			sent := sendPaced(p, 300, 200, 500*time.Microsecond)
			got := drain(s, latency+jitter)
			ds = delays(t, sent, got)
			for i := range got {
				require.Equal(t, uint32(i), got[i].seq, "delivery %d out of order", i)
				if i > 0 {
					require.False(t, got[i].at.Before(got[i-1].at), "delivery %d before %d", i, i-1)
				}
			}
			assert.Zero(t, p.Stats().Reordered)
		})
		return ds
	}
	ds := run(1)
	lo, hi := slices.Min(ds), slices.Max(ds)
	t.Logf("latency %v ± %v: min %v max %v", latency, jitter, lo, hi)
	assert.GreaterOrEqual(t, lo, latency-jitter, "delay below Latency-Jitter")
	assert.LessOrEqual(t, hi, latency+jitter, "delay above Latency+Jitter")
	assert.Greater(t, hi-lo, jitter, "jitter did not spread delays")
	assert.Equal(t, ds, run(1), "same seed, different delays")
	assert.NotEqual(t, ds, run(2), "different seeds, same delays")
}

// A held-back packet arrives exactly ReorderDelay after it was sent, every
// other packet at once, so traffic sent meanwhile overtakes it.
func TestReorder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, reorderDelay = 5000, 10 * time.Millisecond
		p, s := newTestPipe(t, Impairments{Reorder: 0.1, ReorderDelay: reorderDelay}, 3)
		sent := sendPaced(p, n, 64, 100*time.Microsecond)
		got := drain(s, reorderDelay)
		held := 0
		for i, d := range delays(t, sent, got) {
			switch d {
			case reorderDelay:
				held++
			case 0:
			default:
				t.Fatalf("packet %d delivered after %v, want 0 or %v", got[i].seq, d, reorderDelay)
			}
		}
		st := p.Stats()
		assert.Equal(t, int(st.Reordered), held, "held-back packets")
		assert.InDelta(t, 0.1, float64(held)/n, 0.02, "reorder rate")
		assert.Positive(t, late(s.seqs()), "no packet overtaken")
		assert.False(t, s.concurrent.Load(), "Deliver called concurrently")
		checkAccounting(t, st)
	})
}

// Without ReorderDelay a held-back packet waits exactly the default, 1 ms.
func TestReorderDefaultDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, s := newTestPipe(t, Impairments{Reorder: 1}, 1)
		sent := sendPaced(p, 9, 64, 300*time.Microsecond)
		got := drain(s, defaultReorderDelay)
		for i, d := range delays(t, sent, got) {
			assert.Equal(t, uint32(i), got[i].seq, "delivery %d", i)
			assert.Equal(t, time.Millisecond, d, "packet %d", i)
		}
	})
}

// Latency set while packets flow applies to packets sent after Set; taking
// it away again never lets a new packet overtake a delayed one, and once
// the pipe drains, delivery is synchronous again.
func TestSetWhileFlowing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, gap, latency = 300, 100 * time.Microsecond, 30 * time.Millisecond
		p, s := newTestPipe(t, Impairments{}, 1)
		sent := make([]time.Time, n)
		for i := range n {
			switch i {
			case 100:
				require.NoError(t, p.Set(Impairments{Latency: latency}))
			case 200:
				require.NoError(t, p.Set(Impairments{}))
			}
			sent[i] = time.Now()
			p.Send(packet(uint32(i), 100))
			if i < 100 {
				require.Equal(t, i+1, s.count(), "packet %d not delivered inside Send", i)
			}
			time.Sleep(gap)
		}
		got := drain(s, latency)
		require.Len(t, got, n)
		for i, d := range got {
			require.Equal(t, uint32(i), d.seq, "delivery %d out of order", i)
			want := sent[i] // before the change: at once
			switch {
			case i >= 200: // behind the last delayed packet, a nanosecond apart
				want = sent[199].Add(latency + time.Duration(i-199)*spacing)
			case i >= 100:
				want = sent[i].Add(latency)
			}
			require.Equal(t, want.Sub(sent[0]), d.at.Sub(sent[0]), "packet %d", i)
		}

		p.Send(packet(n, 100))
		assert.Equal(t, n+1, s.count(), "delivered inside Send once drained")
		assert.Equal(t, Impairments{}, p.Impairments())
		checkAccounting(t, p.Stats())
	})
}

// Offered twice its rate, the limiter delivers back to back, exactly one
// serialization time apart, and tail-drops what its queue cannot hold: no
// packet waits longer than a full queue takes to drain.
func TestBandwidth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rate, size = 50 * Mbit, 1400
		const serialize = time.Duration(size * 8 * int64(time.Second) / int64(rate)) // 224 µs
		p, s := newTestPipe(t, Impairments{Rate: rate}, 1)
		queue := newShape(p.Impairments()).queueBytes
		const n = 2000 // 224 ms of traffic at twice the rate
		var maxPending int64
		sent := make([]time.Time, n)
		for i := range n {
			sent[i] = time.Now()
			p.Send(packet(uint32(i), size))
			p.mu.Lock()
			maxPending = max(maxPending, p.q.bytes)
			p.mu.Unlock()
			time.Sleep(serialize / 2)
		}
		got := drain(s, time.Second)
		st := p.Stats()
		require.Len(t, got, int(st.Sent-st.DroppedQueue))
		t.Logf("sent %d, delivered %d, tail-dropped %d, pending peak %d bytes, queue %d", n, len(got), st.DroppedQueue, maxPending, queue)
		maxWait := time.Duration((queue + size) * 8 * int64(time.Second) / int64(rate))
		for i, d := range got {
			require.Equal(t, time.Duration(i+1)*serialize, d.at.Sub(sent[0]), "delivery %d (packet %d)", i, d.seq)
			require.LessOrEqual(t, d.at.Sub(sent[d.seq]), maxWait, "packet %d waited longer than a full queue", d.seq)
		}
		assert.Positive(t, st.DroppedQueue, "no tail drops")
		assert.LessOrEqual(t, maxPending, queue+size, "pending bytes beyond QueueBytes")
		assert.True(t, slices.IsSorted(s.seqs()), "rate limiter reordered")
		checkAccounting(t, st)
	})
}

// 1000-byte packets take exactly 8 ms each at 1 Mbit/s, so a burst fills a
// 10000-byte queue: the first packet enters an empty queue, nine more fit
// behind it, the rest are dropped, and the ten leave 8 ms apart.
func TestQueueTailDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, s := newTestPipe(t, Impairments{Rate: Mbit, QueueBytes: 10000}, 1)
		start := time.Now()
		for i := range 100 {
			p.Send(packet(uint32(i), 1000))
		}
		st := p.Stats()
		assert.Equal(t, uint64(90), st.DroppedQueue)
		assert.Equal(t, int64(90), s.released.Load())
		got := drain(s, time.Second)
		require.Len(t, got, 10)
		for i, d := range got {
			assert.Equal(t, uint32(i), d.seq)
			assert.Equal(t, time.Duration(i+1)*8*time.Millisecond, d.at.Sub(start), "packet %d", i)
		}
		checkAccounting(t, p.Stats())
	})
}
