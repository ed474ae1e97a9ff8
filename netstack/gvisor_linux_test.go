package netstack

import (
	"bytes"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/latticelab/lattice/runsc"
)

// gvisorSend is BenchmarkDataPath/gvisor: kernelPair's namespaces, but the
// sender is a static program in a runsc container with --network=host in
// namespace A, as a gvisor-mode agent is: its sockets are made by gVisor's
// sentry on the host kernel and leave through A's wireguard-go TUN. The
// receiver is the kernel's TCP in B. Throughput is measured at the
// receiver from the first byte to the last, so container start-up is not
// counted.
func gvisorSend(b *testing.B) {
	requireKernelNet(b)
	if _, err := runsc.Find(""); err != nil {
		b.Skipf("gvisor: needs runsc (make runsc): %v", err)
	}
	k := kernelNets(b)
	dir := b.TempDir()
	sender := filepath.Join(dir, "sender")
	build := exec.Command("go", "build", "-o", sender, "./testdata/sender")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build sender: %v: %s", err, out)
	}
	m, err := runsc.NewManager(runsc.Config{StateDir: filepath.Join(dir, "runsc")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	ln, err := k.listen(b.Context(), "tcp", netip.AddrPortFrom(k.overB, 5202).String())
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()

	const size = 256 << 20
	var bytesTotal int64
	var elapsed time.Duration
	for i := range b.N {
		type result struct {
			n   int64
			d   time.Duration
			err error
		}
		got := make(chan result, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- result{err: err}
				return
			}
			defer c.Close()
			buf := make([]byte, 64<<10)
			first, err := c.Read(buf)
			start := time.Now()
			if err != nil {
				got <- result{err: err}
				return
			}
			n, err := io.CopyBuffer(io.Discard, c, buf)
			got <- result{n: n + int64(first), d: time.Since(start), err: err}
		}()
		var errOut bytes.Buffer
		code, err := m.Run(b.Context(), runsc.Spec{
			ID: "bench-sender-" + strconv.Itoa(i), NetNS: "/run/netns/" + k.nsA,
			Args: []string{sender, netip.AddrPortFrom(k.overB, 5202).String(), strconv.Itoa(size)},
		}, runsc.Stdio{Stderr: &errOut})
		if err != nil || code != 0 {
			b.Fatalf("sender in runsc: exit %d, %v: %s", code, err, &errOut)
		}
		r := <-got
		if r.err != nil || r.n != size {
			b.Fatalf("received %d of %d bytes: %v", r.n, size, r.err)
		}
		bytesTotal += r.n
		elapsed += r.d
	}
	b.ReportMetric(float64(bytesTotal)*8/elapsed.Seconds()/1e9, "Gbit/s")
}
