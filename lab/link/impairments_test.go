package link

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		im      Impairments
		wantErr string
	}{
		{name: "zero", im: Impairments{}},
		{name: "everything", im: Impairments{
			Latency: 20 * time.Millisecond, Jitter: 30 * time.Millisecond, Loss: 1, Duplicate: 0.5,
			Reorder: 0.1, ReorderDelay: time.Millisecond, Rate: 10 * Mbit, QueueBytes: 1 << 20, MTU: 1500, Down: true,
		}},
		{name: "negative latency", im: Impairments{Latency: -3 * time.Millisecond}, wantErr: "link: negative latency -3ms"},
		{name: "negative jitter", im: Impairments{Jitter: -time.Microsecond}, wantErr: "link: negative jitter -1µs"},
		{name: "loss above one", im: Impairments{Loss: 1.5}, wantErr: "link: loss 1.5 outside [0,1]"},
		{name: "negative loss", im: Impairments{Loss: -0.1}, wantErr: "link: loss -0.1 outside [0,1]"},
		{name: "NaN loss", im: Impairments{Loss: math.NaN()}, wantErr: "link: loss NaN outside [0,1]"},
		{name: "duplicate above one", im: Impairments{Duplicate: 2}, wantErr: "link: duplicate 2 outside [0,1]"},
		{name: "negative reorder", im: Impairments{Reorder: -1}, wantErr: "link: reorder -1 outside [0,1]"},
		{name: "negative reorder delay", im: Impairments{ReorderDelay: -time.Second}, wantErr: "link: negative reorder delay -1s"},
		{name: "negative rate", im: Impairments{Rate: -1}, wantErr: "link: negative rate"},
		{name: "negative queue", im: Impairments{QueueBytes: -1}, wantErr: "link: negative queue bytes -1"},
		{name: "negative mtu", im: Impairments{MTU: -1500}, wantErr: "link: negative mtu -1500"},
		{name: "first bad field wins", im: Impairments{Latency: -time.Second, Loss: 2}, wantErr: "link: negative latency -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.im.Validate()
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
		})
	}
}

func TestIsZero(t *testing.T) {
	assert.True(t, Impairments{}.IsZero())
	assert.False(t, Impairments{MTU: 1500}.IsZero())
	assert.False(t, Impairments{Down: true}.IsZero())
	assert.False(t, Impairments{Loss: 0.01}.IsZero())
}

func TestShapeDefaults(t *testing.T) {
	tests := []struct {
		name          string
		im            Impairments
		fast, delayed bool
		reorderDelay  time.Duration
		queueBytes    int64
	}{
		{name: "zero", im: Impairments{}, fast: true, reorderDelay: time.Millisecond},
		{name: "mtu only", im: Impairments{MTU: 1280}, fast: true, reorderDelay: time.Millisecond},
		{name: "loss", im: Impairments{Loss: 0.1}, reorderDelay: time.Millisecond},
		{name: "down", im: Impairments{Down: true}, reorderDelay: time.Millisecond},
		{name: "latency", im: Impairments{Latency: time.Millisecond}, delayed: true, reorderDelay: time.Millisecond},
		{name: "reorder delay", im: Impairments{Reorder: 0.5, ReorderDelay: 5 * time.Millisecond}, delayed: true, reorderDelay: 5 * time.Millisecond},
		{name: "queue 50ms of 100Mbit", im: Impairments{Rate: 100 * Mbit}, delayed: true, reorderDelay: time.Millisecond, queueBytes: 625000},
		{name: "queue floor", im: Impairments{Rate: Mbit}, delayed: true, reorderDelay: time.Millisecond, queueBytes: 16 << 10},
		{name: "queue explicit", im: Impairments{Rate: Mbit, QueueBytes: 3000}, delayed: true, reorderDelay: time.Millisecond, queueBytes: 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newShape(tt.im)
			assert.Equal(t, tt.fast, s.fast, "fast")
			assert.Equal(t, tt.delayed, s.delayed, "delayed")
			assert.Equal(t, int64(tt.reorderDelay), s.reorderDelay, "reorderDelay")
			assert.Equal(t, tt.queueBytes, s.queueBytes, "queueBytes")
		})
	}
}
