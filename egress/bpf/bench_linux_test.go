package bpf

import (
	"io"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/policy"
)

const benchRules = 1000

// benchPolicy allows the server and names 999 other /32s: 1,000 rules,
// about 1,040 prefixes in the trie.
func benchPolicy(tb testing.TB, p pair, salt int) *policy.Policy {
	tb.Helper()
	return mustPolicy(tb, p, "default: deny\nrules:\n  - allow: {S}\n"+rules(benchRules-1, salt))
}

// BenchmarkReload measures Reload of a 1,000-rule policy: compile, fill a
// fresh trie, swap it in. The next packet sees the new table when Reload
// returns, so this is the time to take effect.
func BenchmarkReload(b *testing.B) {
	requireKernel(b)
	p := newPair(b)
	f := newFilter(b, p, Config{Policy: benchPolicy(b, p, 0)})
	pols := [2]*policy.Policy{benchPolicy(b, p, 1), benchPolicy(b, p, 2)}
	i := 0
	for b.Loop() {
		i++
		require.NoError(b, f.Reload(pols[i%2], nil))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/reload")
	b.ReportMetric(benchRules, "rules")
}

// BenchmarkDataPath measures TCP and UDP goodput across the veth pair
// with no filter and with the filter holding 1,000 rules, alternating in
// the same run, and reports the ratio (goal ≥ 0.95).
func BenchmarkDataPath(b *testing.B) {
	requireKernel(b)
	for _, proto := range []string{"tcp", "udp"} {
		b.Run(proto, func(b *testing.B) {
			p := newPair(b)
			measure := tcpGoodput
			if proto == "udp" {
				measure = udpGoodput
			}
			var off, on []float64
			for b.Loop() {
				off = append(off, measure(b, p))
				f := newFilter(b, p, Config{Policy: benchPolicy(b, p, 0)})
				on = append(on, measure(b, p))
				require.NoError(b, f.Close())
			}
			mo, mn := median(off), median(on)
			b.ReportMetric(mo, "Gbit/s-without")
			b.ReportMetric(mn, "Gbit/s-filter")
			b.ReportMetric(mn/mo, "ratio")
		})
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

const benchWindow = 300 * time.Millisecond

// tcpGoodput sends for benchWindow over one TCP connection and returns
// Gbit/s received.
func tcpGoodput(b *testing.B, p pair) float64 {
	b.Helper()
	var ln net.Listener
	in(b, p.server, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(p.addr(2), 0).String())
		return err
	})
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- 0
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()
	c, err := dial(b, p, "tcp", netip.MustParseAddrPort(ln.Addr().String()), time.Second)
	require.NoError(b, err)
	buf := make([]byte, 64<<10)
	start := time.Now()
	for time.Since(start) < benchWindow {
		_, err := c.Write(buf)
		require.NoError(b, err)
	}
	require.NoError(b, c.Close())
	n := <-got
	return float64(n) * 8 / time.Since(start).Seconds() / 1e9
}

// udpGoodput sends 1,400-byte datagrams for benchWindow and returns
// Gbit/s received.
func udpGoodput(b *testing.B, p pair) float64 {
	b.Helper()
	var srv *net.UDPConn
	in(b, p.server, func() (err error) {
		srv, err = net.ListenUDP("udp", &net.UDPAddr{IP: p.addr(2).AsSlice()})
		return err
	})
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			k, err := srv.Read(buf)
			if err != nil {
				return
			}
			n.Add(int64(k))
		}
	}()
	c, err := dial(b, p, "udp", netip.MustParseAddrPort(srv.LocalAddr().String()), time.Second)
	require.NoError(b, err)
	buf := make([]byte, 1400)
	start := time.Now()
	for time.Since(start) < benchWindow {
		_, _ = c.Write(buf) // ENOBUFS when the queue is full: keep going
	}
	elapsed := time.Since(start)
	time.Sleep(20 * time.Millisecond) // the last datagrams in flight
	c.Close()
	srv.Close()
	<-done
	return float64(n.Load()) * 8 / elapsed.Seconds() / 1e9
}
