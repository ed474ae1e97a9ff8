// Package benchtest holds what benchmarks in several packages measure the
// same way, so their figures compare.
package benchtest

import (
	"io"
	"net"
	"testing"
	"time"
)

// TCP makes b.N 64 KiB writes on send, reads them all on recv, closes
// both and reports goodput in Gbit/s and CPU per byte in cpu-ns/KiB.
//
// cpu-ns/KiB is the user and system CPU time of the whole process (every
// goroutine and thread, the sender's and the receiver's side alike) over
// the timed transfer, divided by the KiB received. It counts what runs in
// this process's threads, including the kernel's work in its system
// calls; kernel work done elsewhere is not counted. For paths through the
// kernel's network stack that matters: softirq processing that runs on a
// ksoftirqd thread or interrupts another process, and softirq time that a
// kernel with CONFIG_IRQ_TIME_ACCOUNTING keeps apart from the task it
// interrupted, are missing. A path through real TUN devices and the
// kernel's TCP therefore reads lower than its true cost; one that stays in
// this process (gVisor's TCP, a lab fabric) is counted whole.
func TCP(b *testing.B, send, recv net.Conn) {
	defer send.Close()
	defer recv.Close()
	const chunk = 64 << 10
	buf := make([]byte, chunk)
	done := make(chan int64)
	go func() {
		n, _ := io.CopyBuffer(io.Discard, recv, make([]byte, chunk))
		done <- n
	}()
	b.SetBytes(chunk)
	b.ResetTimer()
	cpu := StartCPU(b)
	for range b.N {
		if _, err := send.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := send.Close(); err != nil {
		b.Fatal(err)
	}
	n := <-done
	b.StopTimer()
	cpu.Report(n)
	if n != int64(b.N)*chunk {
		b.Fatalf("received %d of %d bytes", n, int64(b.N)*chunk)
	}
	b.ReportMetric(float64(n)*8/b.Elapsed().Seconds()/1e9, "Gbit/s")
}

// CPU measures the process's CPU time from StartCPU to Report.
type CPU struct {
	b     *testing.B
	start time.Duration
	ok    bool
}

// StartCPU notes the process's CPU time so far. Where it cannot be read
// (not a Unix system), Report reports nothing.
func StartCPU(b *testing.B) CPU {
	start, err := ProcessCPU()
	return CPU{b: b, start: start, ok: err == nil}
}

// Report reports the CPU time used since StartCPU per KiB of bytes as
// cpu-ns/KiB (see TCP for what it counts).
func (c CPU) Report(bytes int64) {
	if !c.ok || bytes <= 0 {
		return
	}
	now, err := ProcessCPU()
	if err != nil {
		c.b.Fatal(err)
	}
	c.b.ReportMetric(float64(now-c.start)/(float64(bytes)/1024), "cpu-ns/KiB")
}
