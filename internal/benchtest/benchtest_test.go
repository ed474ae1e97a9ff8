//go:build unix

package benchtest

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProcessCPU checks that work on this process's goroutines shows in
// ProcessCPU.
func TestProcessCPU(t *testing.T) {
	start, err := ProcessCPU()
	require.NoError(t, err)
	deadline := time.Now().Add(5 * time.Second)
	x := uint64(1)
	for time.Now().Before(deadline) {
		for range 1 << 20 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		now, err := ProcessCPU()
		require.NoError(t, err)
		if now > start {
			return
		}
	}
	t.Fatalf("process CPU time did not grow in 5 s of work (%d)", x)
}

// TestTCPMetrics runs TCP over an in-memory pipe and checks both metrics
// are reported and plausible: goodput above zero, and CPU per KiB above
// zero and below the wall-clock time per KiB times the cores there are.
func TestTCPMetrics(t *testing.T) {
	r := testing.Benchmark(func(b *testing.B) {
		send, recv := net.Pipe()
		TCP(b, send, recv)
	})
	require.NotZero(t, r.N, "benchmark failed")
	gbits, cpu := r.Extra["Gbit/s"], r.Extra["cpu-ns/KiB"]
	assert.Positive(t, gbits)
	assert.Positive(t, cpu)
	wallPerKiB := float64(r.T.Nanoseconds()) / (float64(r.N) * 64)
	assert.Less(t, cpu, wallPerKiB*float64(maxProcs()), "cpu-ns/KiB %.0f, wall %.0f ns/KiB", cpu, wallPerKiB)
}

// maxProcs bounds how many threads of this process can run at once: the
// cores, plus one for the runtime's and the kernel's work in system calls.
func maxProcs() int { return runtime.NumCPU() + 1 }
