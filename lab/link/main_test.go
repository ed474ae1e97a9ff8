package link

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// delivery is one packet seen by a sink.
type delivery struct {
	seq uint32
	at  time.Time
	pkt []byte
}

// sink collects delivered and released packets and notices a Deliver called
// from two goroutines at once.
type sink struct {
	busy       atomic.Int32
	concurrent atomic.Bool
	released   atomic.Int64

	mu   sync.Mutex // guards got
	got  []delivery
	keep bool // keep packet bytes
}

func (s *sink) deliver(pkt []byte) {
	if s.busy.Add(1) != 1 {
		s.concurrent.Store(true)
	}
	d := delivery{seq: binary.BigEndian.Uint32(pkt), at: time.Now()}
	if s.keep {
		d.pkt = pkt
	}
	s.mu.Lock()
	s.got = append(s.got, d)
	s.mu.Unlock()
	s.busy.Add(-1)
}

func (s *sink) release([]byte) { s.released.Add(1) }

func (s *sink) deliveries() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func (s *sink) seqs() []uint32 {
	var out []uint32
	for _, d := range s.deliveries() {
		out = append(out, d.seq)
	}
	return out
}

// newTestPipe returns a pipe delivering into a fresh sink, closed at cleanup.
func newTestPipe(t testing.TB, im Impairments, seed uint64) (*Pipe, *sink) {
	t.Helper()
	s := &sink{}
	p, err := New(Config{
		Name:        t.Name(),
		Impairments: im,
		Seed:        seed,
		Deliver:     s.deliver,
		Release:     s.release,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p, s
}

// packet returns a size-byte packet carrying seq in its first four bytes.
func packet(seq uint32, size int) []byte {
	pkt := make([]byte, max(size, 4))
	binary.BigEndian.PutUint32(pkt, seq)
	return pkt
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitDelivered waits until the sink holds n packets.
func waitDelivered(t testing.TB, s *sink, n int, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "deliveries", func() bool { return s.count() >= n })
}

// checkAccounting asserts the Stats identity once nothing is pending.
func checkAccounting(t testing.TB, st Stats) {
	t.Helper()
	dropped := st.DroppedLoss + st.DroppedQueue + st.DroppedMTU + st.DroppedDown + st.DroppedClosed
	require.Equal(t, st.Sent+st.Duplicated, st.Delivered+dropped, "Sent+Duplicated vs Delivered+dropped in %+v", st)
}

// percentile returns the p-th percentile (0..1) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}
