package node_test

import (
	"fmt"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/node"
)

// BenchmarkIdlePeers (issue 22): one node with 1000 idle peers. The peers
// are announced as control would announce them but have no node behind
// them, so nothing answers: for a lazy node that is what idle means (no
// traffic, so no agent, no STUN, no keepalive); an eager node runs an
// ICE agent per peer that gathers and times out, as it does for a peer
// that is down. Each iteration is one second of wall time with the peers
// in place; it reports the process's CPU over those seconds as a share
// of one core (%cpu: an upper bound for the node, as the lab's control,
// relay and STUN run in the process too, idle), the Go heap and stacks in
// use (MiB, the same upper bound) and what the peers added to them
// (KiB/peer, in whole pages; live-B/peer counts the live heap's bytes,
// which a change of a few bytes per peer moves).
func BenchmarkIdlePeers(b *testing.B) {
	for _, bc := range []struct {
		name  string
		lazy  bool
		peers int
	}{{"lazy", true, 1000}, {"eager", false, 1000}} {
		b.Run(fmt.Sprintf("%s/%d", bc.name, bc.peers), func(b *testing.B) {
			w := newLabWorld(b)
			n := startNode(b, w.site(b, "full-cone"), "alpha", &stockNetstack{}, func(c *node.Config) { c.ICE.Lazy = bc.lazy })
			base, baseLive := inUse(), heapLive()
			for i := range bc.peers {
				n.AddPeerForTest(controlapi.Peer{
					NodeID: fmt.Sprintf("fake%d", i), Name: fmt.Sprintf("peer-%d", i), PublicKey: key.NewPrivate().Public(),
					Address: netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 96, byte(i >> 8), byte(i)}), 10),
				})
			}
			if got := n.PeerCount(); got != bc.peers {
				b.Fatalf("%d peers running, want %d", got, bc.peers)
			}
			time.Sleep(5 * time.Second) // past the first attempts' gathering
			cpu0, wall0 := cpuTime(), time.Now()
			for b.Loop() {
				time.Sleep(time.Second)
			}
			cpu, wall := cpuTime()-cpu0, time.Since(wall0)
			used, live := inUse(), heapLive()
			b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "%cpu")
			b.ReportMetric(float64(used)/(1<<20), "MiB")
			b.ReportMetric(float64(int64(used)-int64(base))/1024/float64(bc.peers), "KiB/peer")
			b.ReportMetric(float64(int64(live)-int64(baseLive))/float64(bc.peers), "live-B/peer")
		})
	}
}

// inUse is the Go heap and goroutine stacks in use after a GC.
func inUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// heapLive is the bytes of live heap objects after a GC.
func heapLive() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
