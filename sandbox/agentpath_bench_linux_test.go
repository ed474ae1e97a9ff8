//go:build pro

package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/sandbox"
)

// buildAgentTool builds testdata/agenttool, the agent the benchmarks run.
func buildAgentTool(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "agenttool")
	out, err := exec.Command("go", "build", "-o", bin, "./testdata/agenttool").CombinedOutput()
	require.NoError(tb, err, "building agenttool: %s", out)
	return bin
}

// sink counts what peers send it: each connection's bytes and the time
// from its first byte to its end, the goodput the receiver sees.
type sink struct {
	ln   net.Listener
	mu   sync.Mutex // guards the following fields
	last struct {
		n    int64
		took time.Duration
	}
	wg sync.WaitGroup
}

func newSink(tb testing.TB, ln net.Listener) *sink {
	s := &sink{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() { s.serve(c) })
		}
	})
	tb.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *sink) serve(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 256<<10)
	n, err := c.Read(buf)
	if err != nil {
		return
	}
	start := time.Now()
	m, _ := io.CopyBuffer(io.Discard, c, buf)
	s.mu.Lock()
	s.last.n, s.last.took = int64(n)+m, time.Since(start)
	s.mu.Unlock()
}

func (s *sink) result() (int64, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last.n, s.last.took
}

// BenchmarkAgentPath measures TCP goodput from an agent process to a peer
// through the sandbox, 1 MiB per iteration in one connection:
//
//   - tun: the agent in namespace isolation, its kernel's TCP into the
//     TUN device, the gateway's gVisor stack, the overlay netstack,
//     WireGuard;
//   - socks5: the agent in the host's namespaces through the SOCKS5 proxy
//     (loopback TCP, the proxy, the overlay netstack, WireGuard);
//   - dial: no agent, the sandbox's own Dial from this process: the
//     ceiling both share (the node's WireGuard and its UDP socket).
//
// Run both in one invocation and compare their Gbit/s, and their
// cpu-ms/MiB (cpuTime: the whole machine's work for the transfer, the
// agent's kernel included). The agent's start
// is not timed: the receiving peer times from the first byte to the last.
func BenchmarkAgentPath(b *testing.B) {
	tool := buildAgentTool(b)
	m := newMesh(b)
	web := m.web.Addr()
	ln, err := m.web.Stack.Listen(b.Context(), "tcp", ":5201")
	require.NoError(b, err)
	sk := newSink(b, ln)
	dst := netip.AddrPortFrom(web, 5201).String()

	ns := m.config(b, "agent-tun", b.TempDir())
	ns.SOCKS5, ns.HTTPProxy = "", ""
	tun := startPod(b, ns)
	px := m.config(b, "agent-socks5", "mem:")
	px.Isolation, px.HTTPProxy = sandbox.IsolationProxy, ""
	socks := startPod(b, px)
	for _, c := range []struct {
		name string
		d    *sandbox.PodDriver
		args func(n int64) []string
	}{
		{"tun", tun, func(n int64) []string { return []string{tool, "send", dst, fmt.Sprint(n)} }},
		{"socks5", socks, func(n int64) []string {
			return []string{tool, "send", dst, fmt.Sprint(n), socks.Status().SOCKS5, creds.Username, creds.Password}
		}},
	} {
		if c.name == "socks5" {
			b.Run("dial", func(b *testing.B) { benchDial(b, tun, dst, sk) })
		}
		b.Run(c.name, func(b *testing.B) {
			n := int64(b.N) << 20
			// A first run brings the path up (WireGuard's handshake).
			agentSend(b, c.d, c.args(1<<20))
			cpu := cpuTime(b)
			agentSend(b, c.d, c.args(n))
			cpu = cpuTime(b) - cpu
			got, took := sk.result()
			if got != n {
				b.Fatalf("peer received %d of %d bytes", got, n)
			}
			b.SetBytes(1 << 20)
			b.ReportMetric(float64(n)*8/took.Seconds()/1e9, "Gbit/s")
			b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/MiB")
		})
	}
}

func benchDial(b *testing.B, d *sandbox.PodDriver, dst string, sk *sink) {
	send := func(n int64) {
		c, err := d.Dial(b.Context(), "tcp", dst)
		require.NoError(b, err)
		defer c.Close()
		buf := make([]byte, 64<<10)
		for left := n; left > 0; left -= int64(len(buf)) {
			_, err := c.Write(buf[:min(left, int64(len(buf)))])
			require.NoError(b, err)
		}
		require.NoError(b, c.(interface{ CloseWrite() error }).CloseWrite())
		_, _ = io.Copy(io.Discard, c)
	}
	n := int64(b.N) << 20
	send(1 << 20)
	cpu := cpuTime(b)
	send(n)
	cpu = cpuTime(b) - cpu
	got, took := sk.result()
	if got != n {
		b.Fatalf("peer received %d of %d bytes", got, n)
	}
	b.SetBytes(1 << 20)
	b.ReportMetric(float64(n)*8/took.Seconds()/1e9, "Gbit/s")
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/MiB")
}

// cpuTime is the CPU time, user and system, of this process (the
// sandbox, its gateway, the peer) and of its children that have been
// waited for (the agent, and in namespace isolation its init, when Run
// returns): on a loaded machine the CPU a transfer costs is a firmer
// measure than its goodput.
func cpuTime(b *testing.B) time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		require.NoError(b, syscall.Getrusage(who, &ru))
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}

func agentSend(b *testing.B, d *sandbox.PodDriver, argv []string) {
	b.Helper()
	var errOut strings.Builder
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	code, err := d.Run(ctx, argv, sandbox.Stdio{Stderr: &errOut})
	require.NoError(b, err)
	require.Equal(b, 0, code, "agent: %s", &errOut)
}

// BenchmarkAgentStart measures an agent's start in namespace isolation:
// from Run to the first datagram the agent sends reaching a peer (the
// namespaces, the TUN device and the gateway brought up, the agent's
// process started, one DNS lookup, one packet through the overlay).
func BenchmarkAgentStart(b *testing.B) {
	tool := buildAgentTool(b)
	m := newMesh(b)
	pc, err := m.web.Stack.ListenPacket(b.Context(), "udp", ":7")
	require.NoError(b, err)
	defer pc.Close()
	first := make(chan time.Time, 1)
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			select {
			case first <- time.Now():
			default:
			}
			_, _ = pc.WriteTo(buf[:1], from)
		}
	}()
	cfg := m.config(b, "agent", b.TempDir())
	cfg.SOCKS5, cfg.HTTPProxy = "", ""
	d := startPod(b, cfg)
	argv := []string{tool, "udp", netip.AddrPortFrom(m.web.Addr(), 7).String(), "x"}
	agentSend(b, d, argv) // the overlay path up
	<-first
	var total time.Duration
	b.ResetTimer()
	cpu := cpuTime(b)
	for range b.N {
		start := time.Now()
		agentSend(b, d, argv)
		total += (<-first).Sub(start)
	}
	cpu = cpuTime(b) - cpu
	b.ReportMetric(float64(total.Microseconds())/1e3/float64(b.N), "ms-to-first-packet")
	// The CPU of a whole start and exit (the agent's and its init's
	// included): on a loaded machine, what the wall time is made of.
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/start")
}
