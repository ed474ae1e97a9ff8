package control

import (
	"context"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkRegisterDuringCompaction: changes (each a Create, fsynced, as
// a registration stores its node) from 4 goroutines while a file store of
// 10,000 nodes compacts b.N times, 50 ms apart. "locked" compacts holding
// the store's mutex throughout (as Close does, and as every compaction
// did before); "off-lock" is Compact: the snapshot is written outside the
// mutex. p99-ms and max-ms are of the changes that overlapped a
// compaction, idle-p99-ms of the others (the same run's baseline).
func BenchmarkRegisterDuringCompaction(b *testing.B) {
	for _, mode := range []struct {
		name    string
		compact func(*FileStore) error
	}{
		{"locked", func(s *FileStore) error {
			s.compactMu.Lock()
			defer s.compactMu.Unlock()
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.compactNowLocked()
		}},
		{"off-lock", (*FileStore).Compact},
	} {
		b.Run(mode.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			mem := NewMemStore()
			populate(b, ctx, mem, 10_000)
			path := filepath.Join(b.TempDir(), "registry.json")
			_, err := mem.writeSnapshotLocked(path)
			require.NoError(b, err)
			// A large CompactBytes: only the benchmark's compactions run.
			s, err := OpenFileStoreWith(path, FileStoreOptions{CompactBytes: 1 << 40})
			require.NoError(b, err)
			defer s.Close()

			var (
				gen    atomic.Int64 // odd while a compaction runs
				done   atomic.Bool
				next   atomic.Int64
				wg     sync.WaitGroup
				mu     sync.Mutex
				lat    []time.Duration // changes that overlapped a compaction
				idle   []time.Duration
				failed atomic.Pointer[error]
			)
			next.Store(20_000)
			for range 4 {
				wg.Go(func() {
					var mine, quiet []time.Duration
					// Each writer keeps its last `held` nodes and deletes
					// older ones, so the registry stays about 10,000 and
					// a compaction costs the same at any b.N (growing, a
					// run of 2,000 compactions took an hour and 20 GB).
					const held = 64
					var own []string
					for !done.Load() {
						if len(own) == held {
							if err := s.Delete(ctx, own[0]); err != nil {
								failed.CompareAndSwap(nil, &err)
								return
							}
							own = append(own[:0], own[1:]...)
						}
						i := next.Add(1)
						n := journalNode(int(i))
						// Outside the overlay, so no pre-filled node holds it.
						n.Address = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 8)
						g0, t0 := gen.Load(), time.Now()
						if err := s.Create(ctx, n); err != nil {
							failed.CompareAndSwap(nil, &err)
							return
						}
						d := time.Since(t0)
						own = append(own, n.ID)
						if g0%2 == 1 || gen.Load() != g0 {
							mine = append(mine, d)
						} else {
							quiet = append(quiet, d)
						}
					}
					mu.Lock()
					lat = append(lat, mine...)
					idle = append(idle, quiet...)
					mu.Unlock()
				})
			}
			var busy time.Duration
			for b.Loop() {
				time.Sleep(50 * time.Millisecond)
				gen.Add(1)
				t0 := time.Now()
				require.NoError(b, mode.compact(s))
				busy += time.Since(t0)
				gen.Add(1)
			}
			done.Store(true)
			wg.Wait()
			if p := failed.Load(); p != nil {
				b.Fatal(*p)
			}
			require.NotEmpty(b, lat)
			require.NotEmpty(b, idle)
			slices.Sort(lat)
			slices.Sort(idle)
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
			b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
			b.ReportMetric(ms(idle[len(idle)*99/100]), "idle-p99-ms")
			b.ReportMetric(float64(len(lat)+len(idle))/b.Elapsed().Seconds(), "changes/s")
			b.ReportMetric(ms(busy)/float64(b.N), "ms/compaction")
		})
	}
}
