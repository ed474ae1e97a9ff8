package fabric

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/vtime"
)

// TestPingTimeoutIsTheContexts: a ping nobody answers ends with the
// context's deadline, every time. The read deadline is the context's, and
// its timer may fire first at the very instant (always the same instant in
// virtual time); that used to surface as an "i/o timeout" read error,
// which `lattice ping` printed raw instead of "no reply (timeout)".
func TestPingTimeoutIsTheContexts(t *testing.T) {
	if ok, why := vtime.Available(); !ok {
		t.Skip(why)
	}
	inBubble(t, func(t *testing.T) {
		w := newWorld(t, Config{})
		h := w.addSite(t, profile(t, "full-cone"), 1).hosts[0]
		nobody := netip.MustParseAddr("203.0.113.77")
		for i := range 50 {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			_, err := h.Ping(ctx, nobody)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded, "ping %d: %v", i, err)
		}
	})
}
