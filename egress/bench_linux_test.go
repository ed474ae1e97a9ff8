package egress

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/egress/bpf"
	"github.com/latticelab/lattice/egress/iptables"
	"github.com/latticelab/lattice/policy"
)

const benchRules = 1000

// benchPolicy is 999 deny rules for other addresses, then the rule that
// allows the outside address: the SYN walks every iptables rule before
// it; the eBPF filter looks each packet up in its trie.
func benchPolicy(tb testing.TB, p pair, salt int) *policy.Policy {
	tb.Helper()
	var b strings.Builder
	b.WriteString("default: deny\nrules:\n")
	for i := range benchRules - 1 {
		fmt.Fprintf(&b, "  - deny: 10.81.%d.%d\n    ports: [%d]\n    proto: tcp\n", i/250, i%250+1, 1000+(i+salt)%5000)
	}
	fmt.Fprintf(&b, "  - allow: %s\n    proto: tcp\n", p.outside())
	pol, err := policy.Parse("bench.yaml", []byte(b.String()))
	require.NoError(tb, err)
	return pol.WithOverlay(p.overlay())
}

// benchFilter is one backend's filter on the pair's client interface.
type benchFilter interface {
	Reload(*policy.Policy, map[string][]netip.Addr) error
	Close() error
}

func newBenchFilter(tb testing.TB, p pair, backend string, pol *policy.Policy) benchFilter {
	tb.Helper()
	if backend == IPTables {
		f, err := iptables.New(iptables.Config{Interface: "vc", Netns: p.client, Policy: pol})
		require.NoError(tb, err)
		return f
	}
	var f *bpf.Filter
	in(tb, p.client, func() (err error) {
		f, err = bpf.New(bpf.Config{Interface: "vc", Policy: pol})
		return err
	})
	return f
}

// BenchmarkDataPath/kernel measures TCP goodput through the kernel's
// stack across the veth pair with no egress filter, with the eBPF filter
// holding 1,000 rules (Pro) and with the same policy on iptables,
// alternating in one run, and reports each against the unfiltered
// median (goal for eBPF: ≥ 0.95).
func BenchmarkDataPath(b *testing.B) {
	requireRoot(b)
	b.Run("kernel", func(b *testing.B) {
		p := newPair(b)
		listen(b, p, 8080)
		to := netip.AddrPortFrom(p.outside(), 8080)
		pol := benchPolicy(b, p, 0)
		got := map[string][]float64{}
		order := append([]string{"none"}, backends()...)
		for b.Loop() {
			// Every other round runs in reverse, so no variant always
			// follows another (a warm cache, a neighbour's burst).
			slices.Reverse(order)
			for _, v := range order {
				if v == "none" {
					got[v] = append(got[v], goodput(b, p, to))
					continue
				}
				f := newBenchFilter(b, p, v, pol)
				got[v] = append(got[v], goodput(b, p, to))
				require.NoError(b, f.Close())
			}
		}
		none := median(got["none"])
		b.ReportMetric(none, "Gbit/s-none")
		for _, backend := range backends() {
			m := median(got[backend])
			b.ReportMetric(m, "Gbit/s-"+backend)
			b.ReportMetric(m/none, "ratio-"+backend)
		}
	})
}

// BenchmarkReload measures a reload of a 1,000-rule policy by each
// backend: the new rules are in force when Reload returns (one map swap,
// one iptables-restore transaction), so this is the time to take effect.
func BenchmarkReload(b *testing.B) {
	requireRoot(b)
	for _, backend := range backends() {
		b.Run(backend, func(b *testing.B) {
			p := newPair(b)
			pols := [2]*policy.Policy{benchPolicy(b, p, 1), benchPolicy(b, p, 2)}
			f := newBenchFilter(b, p, backend, benchPolicy(b, p, 0))
			defer f.Close()
			i := 0
			for b.Loop() {
				i++
				require.NoError(b, f.Reload(pols[i%2], nil))
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/reload")
			b.ReportMetric(benchRules, "rules")
		})
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// goodput sends 64 KiB writes for 300 ms over one echoing TCP connection,
// reading the echo back, and returns Gbit/s sent.
func goodput(b *testing.B, p pair, to netip.AddrPort) float64 {
	b.Helper()
	c, err := dial(b, p, to, time.Second)
	require.NoError(b, err)
	defer c.Close()
	done := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(io.Discard, c)
		done <- n
	}()
	buf := make([]byte, 64<<10)
	start := time.Now()
	var sent int64
	for time.Since(start) < 300*time.Millisecond {
		n, err := c.Write(buf)
		require.NoError(b, err)
		sent += int64(n)
	}
	elapsed := time.Since(start)
	require.NoError(b, c.(*net.TCPConn).CloseWrite())
	<-done
	return float64(sent) * 8 / elapsed.Seconds() / 1e9
}
