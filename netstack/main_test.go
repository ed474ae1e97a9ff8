package netstack

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	addrA = netip.MustParsePrefix("100.64.1.2/10")
	addrB = netip.MustParsePrefix("100.64.1.3/10")
	// blackhole is in the overlay prefix but nobody's: packets to it are
	// dropped without an answer.
	blackhole = netip.MustParseAddrPort("100.64.1.200:80")
)

// newStack returns a Stack closed at cleanup.
func newStack(tb testing.TB, addr netip.Prefix) *Stack {
	tb.Helper()
	s, err := New(Config{Address: addr})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, s.Close()) })
	return s
}

// wire joins two adapters back to back without WireGuard: what one
// reads, the other is written, batch for batch. It stops when either
// adapter closes; cleanup closes both and waits.
func wire(tb testing.TB, a, b *TUNAdapter) {
	tb.Helper()
	var wg sync.WaitGroup
	move := func(from, to *TUNAdapter) {
		const offset = 16 // as wireguard-go leaves room for its header
		bufs := make([][]byte, BatchSize)
		for i := range bufs {
			bufs[i] = make([]byte, offset+65535)
		}
		sizes := make([]int, BatchSize)
		out := make([][]byte, BatchSize)
		for {
			n, err := from.Read(bufs, sizes, offset)
			if err != nil {
				return
			}
			for i := range n {
				out[i] = bufs[i][:offset+sizes[i]]
			}
			if _, err := to.Write(out[:n], offset); err != nil {
				return
			}
		}
	}
	wg.Go(func() { move(a, b) })
	wg.Go(func() { move(b, a) })
	tb.Cleanup(func() {
		_ = a.Close()
		_ = b.Close()
		wg.Wait()
	})
}

func ctxT(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}
