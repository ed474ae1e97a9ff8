package node

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
)

// TestPendingPathPassesCopies: WireGuard parses a new peer's endpoint
// before it starts the peer, and drops what comes from the peer until
// then; an initiation that came in that moment is not taken for passed,
// so its resend is not dropped as a copy (the resend then waited out the
// leading side's glare yield, 1.3 s). Once the node's peer holds the
// path (Ready), copies are dropped as before.
func TestPendingPathPassesCopies(t *testing.T) {
	b := NewBind(nil)
	b.SetRelay(&recordRelay{})
	pk := key.Public{7}
	ep, err := b.ParseEndpoint(EndpointString(pk))
	require.NoError(t, err)
	p := ep.(*Endpoint).Path
	t.Cleanup(func() { p.stopResends() })
	assert.Same(t, p, b.Peer(pk), "the path WireGuard parsed is the peer's")
	require.True(t, p.pending.Load(), "a path WireGuard's configuration made")

	init, _ := handshakeMessages()
	b.DeliverRelayed(pk, init)
	b.DeliverRelayed(pk, init)
	assert.Len(t, b.relayIn, 2, "the resend of an initiation a peer not yet started may have dropped")
	assert.Zero(t, b.DuplicateInitiations())

	b.Ready(p)
	init[8]++
	b.DeliverRelayed(pk, init)
	b.DeliverRelayed(pk, init)
	assert.Len(t, b.relayIn, 3, "once started, a copy does not reach WireGuard")
	assert.Equal(t, uint64(1), b.DuplicateInitiations())

	q, err := b.ParseEndpoint(EndpointString(pk))
	require.NoError(t, err)
	assert.False(t, q.(*Endpoint).Path.pending.Load(), "WireGuard parsing a held peer's endpoint again leaves it held")
}

// TestAnswerGate: while WireGuard answers a peer's new initiation, the
// interface holds packets to that peer until the answer goes out (or
// answerHold passes), so that none of them makes WireGuard start an
// initiation of ours in between, which would replace the one it answers;
// the Bind holds the initiation while the reader is out of Read with
// packets for WireGuard, at most answerSettle.
func TestAnswerGate(t *testing.T) {
	b := NewBind(nil)
	b.SetRelay(&recordRelay{})
	p := b.Peer(key.Public{9})
	t.Cleanup(func() { p.stopResends() })
	f := &fakeTUN{in: make(chan []byte, 4)}
	u := newUnreachableTUN(f)
	t.Cleanup(func() { u.Close() })
	u.gate = &b.gate
	u.setPath(netip.MustParseAddr("100.64.0.2"), p)
	init, resp := handshakeMessages()
	init[8] = 0xaa // its ephemeral key

	read := func() time.Duration {
		t.Helper()
		f.in <- ipv4("100.64.0.1", "100.64.0.2", 17, 0, []byte("x"))
		bufs, sizes := [][]byte{make([]byte, 1500)}, []int{0}
		start := time.Now()
		n, err := u.Read(bufs, sizes, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		return time.Since(start)
	}
	assert.Less(t, read(), answerHold/2, "no initiation being answered: no hold")

	// The reader is out of Read (the packet above on its way): the Bind
	// holds the peer's initiation until it is back, at most answerSettle.
	start := time.Now()
	b.DeliverRelayed(p.Key, init)
	assert.GreaterOrEqual(t, time.Since(start), answerSettle, "the initiation passed while the reader was busy")
	require.Len(t, b.relayIn, 1)

	// Our answer goes out once the reader waits: a packet to the peer
	// waits for it.
	var answering atomic.Int64 // when the answer had gone (Unix ns)
	go func() {
		for end := time.Now().Add(time.Second); b.gate.waiting.Load() == 0 && time.Now().Before(end); {
			time.Sleep(100 * time.Microsecond)
		}
		_ = b.Send([][]byte{resp}, &Endpoint{Path: p})
		answering.Store(time.Now().UnixNano())
	}()
	held := read()
	// (The reader wakes as the answer goes, which may be a moment
	// before the goroutine notes it: answered is "gone, or going".)
	answered := answering.Load() != 0 || p.answerBy.Load() == 0
	assert.True(t, answered, "a packet to the peer passed before the answer")
	assert.Less(t, held, answerHold, "held past the answer")

	// A copy of that initiation holds nothing; a new one WireGuard
	// refuses (no answer) holds packets answerHold at most.
	b.DeliverRelayed(p.Key, init)
	assert.Less(t, read(), answerHold/2, "a copy held the peer's packets")
	time.Sleep(answerEvery)
	init[8]++
	u.gate.enterRead() // the reader back in Read: the Bind does not wait
	b.DeliverRelayed(p.Key, init)
	held = read()
	assert.GreaterOrEqual(t, held, answerHold*3/4, "the hold of an unanswered initiation")
	assert.Less(t, held, 10*answerHold, "the hold of an unanswered initiation has a bound")
}

// batchTUN returns every packet queued so far in one Read, as Linux TUN
// with offloads does (BatchSize 128).
type batchTUN struct {
	fakeTUN
	batch chan [][]byte
}

func (f *batchTUN) BatchSize() int { return 128 }
func (f *batchTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	pkts := <-f.batch
	for i, p := range pkts {
		sizes[i] = copy(bufs[i][offset:], p)
	}
	return len(pkts), nil
}

// TestAnswerGateBounds: the reader is wireguard-go's only one, so a hold
// delays packets to every peer. It is bounded: one Read waits answerHold
// in all while holds on many peers of its batch follow one another
// (initiations forged for them, which WireGuard refuses unanswered), and
// a peer with a session (something authenticated from it lately) holds
// nothing, its initiation forged or not.
func TestAnswerGateBounds(t *testing.T) {
	b := NewBind(nil)
	b.SetRelay(&recordRelay{})
	f := &batchTUN{fakeTUN: fakeTUN{in: make(chan []byte)}, batch: make(chan [][]byte, 1)}
	u := newUnreachableTUN(f)
	t.Cleanup(func() { u.Close() })
	u.gate = &b.gate
	var paths []*Path
	var batch [][]byte
	for i := range 6 {
		p := b.Peer(key.Public{byte(10 + i)})
		t.Cleanup(func() { p.stopResends() })
		dst := fmt.Sprintf("100.64.0.%d", 10+i)
		u.setPath(netip.MustParseAddr(dst), p)
		paths = append(paths, p)
		batch = append(batch, ipv4("100.64.0.1", dst, 17, 0, []byte("x")))
	}
	bufs, sizes := make([][]byte, 128), make([]int, 128)
	for i := range bufs {
		bufs[i] = make([]byte, 1500)
	}
	forged := make([]byte, 148)
	forged[0] = 1
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { // a hold on the next peer before the last one's ends
		defer close(done)
		for i := 0; ; i++ {
			forged[8]++
			b.DeliverRelayed(paths[i%len(paths)].Key, forged)
			select {
			case <-stop:
				return
			case <-time.After(answerHold * 9 / 10):
			}
		}
	}()
	time.Sleep(answerHold / 4)
	f.batch <- batch
	start := time.Now()
	_, err := u.Read(bufs, sizes, 0)
	held := time.Since(start)
	close(stop)
	<-done
	require.NoError(t, err)
	assert.Less(t, held, 2*answerHold, "one Read held beyond its bound")

	// Peers with a session: a forged initiation attributed to one holds
	// nothing.
	time.Sleep(answerHold)
	now := time.Now().UnixNano()
	for _, p := range paths {
		p.noteAuth(now)
	}
	forged[8]++
	b.DeliverRelayed(paths[0].Key, forged)
	f.batch <- batch
	start = time.Now()
	_, err = u.Read(bufs, sizes, 0)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), answerHold/2, "a peer with a session held the reader")
}
