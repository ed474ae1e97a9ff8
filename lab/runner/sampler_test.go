package runner

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/latticelab/lattice/lab/report"
)

// TestThin keeps every other sample, and always the last, in order.
func TestThin(t *testing.T) {
	var ss []report.TrafficSample
	for i := range 6 {
		ss = append(ss, report.TrafficSample{At: time.Duration(i) * time.Second, DirectTx: uint64(i)})
	}
	got := thin(ss)
	var at []time.Duration
	for _, s := range got {
		at = append(at, s.At)
	}
	assert.Equal(t, []time.Duration{0, 2 * time.Second, 4 * time.Second, 5 * time.Second}, at)
	assert.Len(t, thin(got[:3]), 2, "an odd count's last is kept once")
}
