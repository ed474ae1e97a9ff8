// Package benchtest holds what benchmarks in several packages measure the
// same way, so their figures compare.
package benchtest

import (
	"io"
	"net"
	"testing"
)

// TCP makes b.N 64 KiB writes on send, reads them all on recv, closes
// both and reports goodput in Gbit/s.
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
	if n != int64(b.N)*chunk {
		b.Fatalf("received %d of %d bytes", n, int64(b.N)*chunk)
	}
	b.ReportMetric(float64(n)*8/b.Elapsed().Seconds()/1e9, "Gbit/s")
}
