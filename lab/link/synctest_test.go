package link

import (
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
