package control

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// watchGate holds the watch's entry for one node until released: the
// instance whose watch it is lags another's write of that node.
type watchGate struct {
	hold    atomic.Pointer[string] // the node ID whose entry waits
	release chan struct{}
	once    sync.Once
}

func newWatchGate() *watchGate { return &watchGate{release: make(chan struct{})} }

func (g *watchGate) hook(id string, _ uint64) {
	if h := g.hold.Load(); h != nil && *h == id {
		<-g.release
	}
}

func (g *watchGate) open() { g.once.Do(func() { close(g.release) }) }

// holding makes the gate hold k's node.
func (g *watchGate) holding(k key.Private) {
	id := nodeID(k.Public())
	g.hold.Store(&id)
}

func peerIDs(peers []controlapi.Peer) []string {
	var ids []string
	for _, p := range peers {
		ids = append(ids, p.NodeID)
	}
	return ids
}

// laggingPair is sharedPair with b's watch held by the gate it returns
// (opened at cleanup, before the servers close), and an observer node
// registered on b with its session on b, so its list is served by b.
func laggingPair(t *testing.T, b Config) (sa, sb *Server, gate *watchGate, obs *controlapi.Session) {
	t.Helper()
	ctx := ctxT(t)
	gate = newWatchGate()
	b.watchHook = gate.hook
	sa, sb = sharedPair(t, Config{}, b)
	t.Cleanup(gate.open)
	r := mustRegister(ctx, t, sb.NATS().URL(), "observer")
	obs, err := controlapi.Connect(ctx, netx.OS, r.NodeID, r.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	t.Cleanup(obs.Close)
	return sa, sb, gate, obs
}

// openOnRead opens the gate once b's barrier sent a read after the one
// count it had made: so a list is answered without the node while no
// barrier reads (the bug), and with it once one does.
func openOnRead(ctx context.Context, t *testing.T, b *Server, gate *watchGate) {
	t.Helper()
	if b.barrier == nil {
		return // no barrier: the gate opens at cleanup
	}
	from := b.barrier.reads.Load()
	done, stop := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for b.barrier.reads.Load() == from {
			select {
			case <-ctx.Done():
				return
			case <-stop:
				return
			case <-tick.C:
			}
		}
		gate.open()
	}()
}

// TestPeerListWaitsForLaggingWatch: a node registered on instance A, its
// PeerAdded event already out, is in the peer list instance B serves
// right after, though B's watch has not brought it yet: B's list waits
// for its view to catch up with the registry. Without that the node,
// which applied the event before asking, removed the new peer from its
// list, and no event brought it back while that peer stayed up.
func TestPeerListWaitsForLaggingWatch(t *testing.T) {
	ctx := ctxT(t)
	a, b, gate, obs := laggingPair(t, Config{})
	xKey := newPriv(t)
	gate.holding(xKey)
	x, err := controlapi.RegisterNATS(ctx, netx.OS, a.NATS().URL(), controlapi.Join{Token: testToken, Name: "x", Key: xKey})
	require.NoError(t, err)
	require.False(t, b.view.has(x.NodeID), "B's watch was to lag")

	openOnRead(ctx, t, b, gate)
	peers, err := obs.Peers(ctx)
	require.NoError(t, err)
	assert.Contains(t, peerIDs(peers), x.NodeID, "B's list lacks the node A registered before it was asked")
}

// TestPeerListBarrierTimesOut: a watch that stays behind past the
// barrier's bound does not hold the list: it is served from the view as
// it is, and the lag is logged.
func TestPeerListBarrierTimesOut(t *testing.T) {
	ctx := ctxT(t)
	var logs lockedBuffer
	const wait = 200 * time.Millisecond
	a, b, gate, obs := laggingPair(t, Config{barrierWait: wait, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	xKey := newPriv(t)
	gate.holding(xKey)
	x, err := controlapi.RegisterNATS(ctx, netx.OS, a.NATS().URL(), controlapi.Join{Token: testToken, Name: "x", Key: xKey})
	require.NoError(t, err)

	start := time.Now()
	peers, err := obs.Peers(ctx)
	require.NoError(t, err, "the list is served though the view lags")
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, wait, "served before the barrier's bound")
	assert.Less(t, took, 5*wait, "held well past the barrier's bound")
	assert.NotContains(t, peerIDs(peers), x.NodeID, "the watch was held: the view cannot have it")
	assert.Contains(t, logs.String(), "registry view served behind the registry")
	assert.Contains(t, logs.String(), "revisions_behind=")

	// Once the watch catches up, lists have the node at once.
	gate.open()
	require.Eventually(t, func() bool { return b.view.has(x.NodeID) }, 5*time.Second, time.Millisecond)
	peers, err = obs.Peers(ctx)
	require.NoError(t, err)
	assert.Contains(t, peerIDs(peers), x.NodeID)
}

// TestBarrierSharesReads: requests waiting together share one read of
// the registry's revision (one in flight at a time, the requests arriving
// meanwhile joining the next), and each gets a revision read after it
// arrived: at least the one the registry had then.
func TestBarrierSharesReads(t *testing.T) {
	const requests = 1000
	var inflight, most atomic.Int32
	var revision atomic.Uint64
	b := newReadBarrier(func(ctx context.Context) (uint64, error) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		rev := revision.Load()
		time.Sleep(time.Millisecond) // the rest of a JetStream round trip
		return rev, nil
	}, time.Second, nil, slog.New(slog.DiscardHandler))
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for range requests {
		wg.Go(func() {
			want := revision.Add(1) // the registry changed, then the request came
			got, err := b.target(ctx)
			assert.NoError(t, err)
			assert.GreaterOrEqual(t, got, want, "a revision read before the request came")
		})
	}
	wg.Wait()
	reads := b.reads.Load()
	t.Logf("%d concurrent requests, %d reads", requests, reads)
	assert.Equal(t, int32(1), most.Load(), "reads in flight at once")
	assert.Less(t, reads, uint64(requests/10), "requests waiting together did not share reads")
}

// TestFileStoreHasNoBarrier: a store of one instance needs no barrier.
func TestFileStoreHasNoBarrier(t *testing.T) {
	env := startServer(t, "")
	assert.Nil(t, env.srv.barrier)
}

// BenchmarkPeerListBarrier: peer list requests served by an instance
// sharing a KV registry, with and without the read barrier, one at a time
// (ns/op is each request's latency) and 32 at once (ns/op is over the
// throughput); reads/op is the JetStream calls the barrier made per
// request.
func BenchmarkPeerListBarrier(b *testing.B) {
	for _, bench := range []struct {
		name     string
		off      bool
		parallel bool
		pre      int // nodes stored before the run (the observer's lists are of its first page)
	}{
		{"serial/barrier", false, false, 0}, {"serial/none", true, false, 0},
		{"parallel/barrier", false, true, 0}, {"parallel/none", true, true, 0},
		{"serial/barrier/10000", false, false, 10_000}, {"serial/none/10000", true, false, 10_000},
	} {
		b.Run(bench.name, func(b *testing.B) {
			ctx := ctxT(b)
			sa, sb := sharedPair(b, Config{}, Config{noBarrier: bench.off})
			if bench.pre > 0 {
				pctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				populate(b, pctx, sa.Store(), bench.pre)
				require.Eventually(b, func() bool { return sb.view.len() == bench.pre }, time.Minute, 10*time.Millisecond, "the view follows the store")
			}
			for i := range 20 {
				mustRegister(ctx, b, sa.NATS().URL(), "n"+string(rune('a'+i)))
			}
			r := mustRegister(ctx, b, sb.NATS().URL(), "observer")
			obs, err := controlapi.Connect(ctx, netx.OS, r.NodeID, r.NATS, controlapi.Handlers{})
			require.NoError(b, err)
			defer obs.Close()
			var from uint64
			if sb.barrier != nil {
				from = sb.barrier.reads.Load()
			}
			list := obs.Peers
			if bench.pre > 0 {
				// The first page alone: the one behind the barrier, and
				// not 10,000 peers to decode.
				list = func(ctx context.Context) ([]controlapi.Peer, error) {
					_, err := obs.Conn().RequestWithContext(ctx, controlapi.NodeSubject(r.NodeID, controlapi.LeafPeerList), []byte("{}"))
					return nil, err
				}
			}
			b.ResetTimer()
			if bench.parallel {
				b.SetParallelism(32 / runtime.GOMAXPROCS(0))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := list(context.Background()); err != nil {
							b.Error(err)
							return
						}
					}
				})
			} else {
				for b.Loop() {
					if _, err := list(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			if sb.barrier != nil {
				b.ReportMetric(float64(sb.barrier.reads.Load()-from)/float64(b.N), "reads/op")
			}
		})
	}
}

// TestConcurrentPeerListsShareReads: many nodes asking for their lists
// at once (a reconnect after an outage) cost the registry far fewer
// reads than requests, and each list is whole. Each read takes 5 ms, as
// from a JetStream a network away: with a loopback one as fast as the
// requests come, a loaded machine served them one by one (235 reads).
func TestConcurrentPeerListsShareReads(t *testing.T) {
	const requests = 400
	ctx := ctxT(t)
	a, b := sharedPair(t, Config{}, Config{barrierReadHook: func() { time.Sleep(5 * time.Millisecond) }})
	for _, name := range []string{"p", "q", "r"} {
		mustRegister(ctx, t, a.NATS().URL(), name)
	}
	r := mustRegister(ctx, t, b.NATS().URL(), "observer")
	obs, err := controlapi.Connect(ctx, netx.OS, r.NodeID, r.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer obs.Close()
	from := b.barrier.reads.Load()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range requests {
		wg.Go(func() {
			<-start
			peers, err := obs.Peers(ctx)
			if assert.NoError(t, err) {
				assert.Len(t, peers, 3)
			}
		})
	}
	close(start)
	wg.Wait()
	reads := b.barrier.reads.Load() - from
	t.Logf("%d concurrent peer lists, %d registry reads", requests, reads)
	assert.Less(t, reads, uint64(requests/2), "concurrent lists did not share reads")
}

// recordHandler keeps the records logged through it.
type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// logged is the records with message msg, each as its attributes.
func (h *recordHandler) logged(msg string) []map[string]slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]slog.Value
	for _, r := range h.records {
		if r.Message != msg {
			continue
		}
		attrs := map[string]slog.Value{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
		out = append(out, attrs)
	}
	return out
}

// TestBarrierLagWarningRateLimited: behind a stuck watch every request
// waits out the bound, and each would warn; at most one warning goes out
// per barrierWarnEvery, and the next one counts those held back.
func TestBarrierLagWarningRateLimited(t *testing.T) {
	const lags = "registry view served behind the registry: its watch lags"
	const fails = "registry view served without catching up: reading the registry's revision failed"
	for _, tt := range []struct {
		name string
		read func(ctx context.Context) (uint64, error)
		msg  string
	}{
		{"stuck watch", func(context.Context) (uint64, error) { return 7, nil }, lags},
		{"read fails", func(context.Context) (uint64, error) { return 0, errors.New("no leader") }, fails},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := &recordHandler{}
			b := newReadBarrier(tt.read, time.Millisecond, nil, slog.New(h))
			now := time.Unix(1_800_000_000, 0)
			b.now = func() time.Time { return now }
			ctx := ctxT(t)
			const requests = 50
			for range requests {
				b.sync(ctx, "peer list")
			}
			got := h.logged(tt.msg)
			require.Equal(t, 1, len(got), "warnings for %d requests within %v", requests, barrierWarnEvery)
			assert.NotContains(t, got[0], "suppressed")

			now = now.Add(barrierWarnEvery - time.Millisecond)
			b.sync(ctx, "peer list")
			require.Equal(t, 1, len(h.logged(tt.msg)), "a warning before barrierWarnEvery passed")

			now = now.Add(time.Millisecond)
			b.sync(ctx, "peer list")
			got = h.logged(tt.msg)
			require.Equal(t, 2, len(got), "no warning once barrierWarnEvery passed")
			assert.Equal(t, int64(requests), got[1]["suppressed"].Int64(), "the warnings held back, counted in the next")
		})
	}
}

// TestBarrierReadsStreamEnd: the barrier reads the bucket's last
// revision, which the stream's state keeps (the server's cost does not
// grow with the nodes, unlike the last message over node.>), and the
// watch, following every key, reaches it though the bucket's last writes
// are claims: here a deletion's, which frees the name and address after
// the node's record.
func TestBarrierReadsStreamEnd(t *testing.T) {
	ctx := ctxT(t)
	_, b := sharedPair(t, Config{}, Config{})
	kv := b.cfg.Store.(*KVStore)
	pub := newKey(t)
	n := &Node{ID: nodeID(pub), Name: "gone", PublicKey: pub, Address: netip.MustParsePrefix("100.64.9.9/10"), Epoch: 1}
	require.NoError(t, kv.Create(ctx, n))
	require.NoError(t, kv.Delete(ctx, n.ID))
	info, err := kv.stream.Info(ctx)
	require.NoError(t, err)
	last := info.State.LastSeq
	require.Greater(t, last, n.rev+1, "the claims freed after the record")

	rev, err := kv.lastRevision(ctx)
	require.NoError(t, err)
	assert.Equal(t, last, rev, "the barrier's read")
	require.Eventually(t, func() bool {
		b.barrier.mu.Lock()
		defer b.barrier.mu.Unlock()
		return b.barrier.applied >= last
	}, 5*time.Second, time.Millisecond,
		"the watch never reached the bucket's last revision, a claim's")
	start := time.Now()
	b.barrier.sync(ctx, "peer list")
	assert.Less(t, time.Since(start), b.barrier.wait, "the barrier waited out its bound")
}
