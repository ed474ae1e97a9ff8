package link

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// batchSink records the runs DeliverBatch receives.
type batchSink struct {
	sink
	mu   sync.Mutex // guards runs
	runs []int      // length of each run
}

func (b *batchSink) deliverBatch(pkts [][]byte) {
	b.mu.Lock()
	b.runs = append(b.runs, len(pkts))
	b.mu.Unlock()
	for _, pkt := range pkts {
		b.deliver(pkt)
	}
}

func newBatchPipe(t *testing.T, im Impairments) (*Pipe, *batchSink) {
	t.Helper()
	s := &batchSink{}
	p, err := New(Config{Name: t.Name(), Impairments: im, Deliver: s.deliver, DeliverBatch: s.deliverBatch, Release: s.release})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p, s
}

func batchOf(first uint32, n, size int) [][]byte {
	var pkts [][]byte
	for i := range n {
		pkts = append(pkts, packet(first+uint32(i), size))
	}
	return pkts
}

func TestSendBatch(t *testing.T) {
	tests := []struct {
		name     string
		im       Impairments
		sizes    []int
		wantSeqs []uint32
		wantRuns []int
		want     Stats
	}{
		{name: "perfect link: one run", sizes: []int{100, 100, 100}, wantSeqs: []uint32{0, 1, 2}, wantRuns: []int{3},
			want: Stats{Sent: 3, Delivered: 3, Bytes: 300}},
		{name: "within the MTU: one run", im: Impairments{MTU: 200}, sizes: []int{100, 200}, wantSeqs: []uint32{0, 1}, wantRuns: []int{2},
			want: Stats{Sent: 2, Delivered: 2, Bytes: 300}},
		{name: "one over the MTU: the others one by one", im: Impairments{MTU: 200}, sizes: []int{100, 300, 150}, wantSeqs: []uint32{0, 2},
			want: Stats{Sent: 3, Delivered: 2, DroppedMTU: 1, Bytes: 250}},
		{name: "down: all dropped", im: Impairments{Down: true}, sizes: []int{100, 100},
			want: Stats{Sent: 2, DroppedDown: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, s := newBatchPipe(t, tt.im)
			var pkts [][]byte
			for i, size := range tt.sizes {
				pkts = append(pkts, packet(uint32(i), size))
			}
			p.SendBatch(pkts)
			assert.Equal(t, tt.wantSeqs, s.seqs(), "delivered before SendBatch returned, in order")
			assert.Equal(t, tt.wantRuns, s.runs)
			assert.Equal(t, tt.want, p.Stats())
			assert.Equal(t, int64(len(tt.sizes)-len(tt.wantSeqs)), s.released.Load())
		})
	}
}

// A delayed link hands what falls due at one instant to DeliverBatch in
// one run, after exactly its delay.
func TestSendBatchDelayedVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &batchSink{}
		p, err := New(Config{Impairments: Impairments{Latency: 10 * time.Millisecond}, Deliver: s.deliver, DeliverBatch: s.deliverBatch})
		require.NoError(t, err)
		defer p.Close()
		start := time.Now()
		p.SendBatch(batchOf(0, 5, 100))
		assert.Zero(t, s.count(), "delivered before the latency")
		synctest.Wait()
		time.Sleep(10*time.Millisecond + 5) // the five are spaced a nanosecond apart
		synctest.Wait()
		assert.Equal(t, []uint32{0, 1, 2, 3, 4}, s.seqs())
		for _, d := range s.deliveries() {
			assert.GreaterOrEqual(t, d.at.Sub(start), 10*time.Millisecond)
		}
		st := p.Stats()
		assert.Equal(t, uint64(5), st.Delivered)
		assert.Equal(t, uint64(500), st.Bytes)
		s.mu.Lock()
		defer s.mu.Unlock()
		total := 0
		for _, n := range s.runs {
			total += n
		}
		assert.Equal(t, 5, total, "every delayed packet went through DeliverBatch")
	})
}

// Without DeliverBatch a batch goes to Deliver packet by packet.
func TestSendBatchWithoutDeliverBatch(t *testing.T) {
	p, s := newTestPipe(t, Impairments{}, 1)
	p.SendBatch(batchOf(7, 4, 64))
	assert.Equal(t, []uint32{7, 8, 9, 10}, s.seqs())
	assert.Equal(t, Stats{Sent: 4, Delivered: 4, Bytes: 256}, p.Stats())
}

// A batch sent while packets are pending queues behind them.
func TestSendBatchBehindPending(t *testing.T) {
	p, s := newBatchPipe(t, Impairments{Latency: 20 * time.Millisecond})
	p.Send(packet(0, 10))
	require.NoError(t, p.Set(Impairments{}))
	p.SendBatch(batchOf(1, 3, 10))
	waitDelivered(t, &s.sink, 4, 2*time.Second)
	assert.Equal(t, []uint32{0, 1, 2, 3}, s.seqs())
	checkAccounting(t, p.Stats())
}
