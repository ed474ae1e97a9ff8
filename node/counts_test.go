package node

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestPathSwitchesCounted: every path event a peer records is counted by
// new path and reason label, past the 32 its history keeps.
func TestPathSwitchesCounted(t *testing.T) {
	var c switchCounts
	p := &peer{env: &peerEnv{now: time.Now, log: slog.New(slog.DiscardHandler), switched: c.add}}
	for range 25 {
		p.record(PathDirect, netip.MustParseAddrPort("192.0.2.1:51820"), "ICE nominated a pair")
		p.record(PathRelay, netip.AddrPort{}, "direct path went silent (no answer for 5s)")
	}
	p.record(PathOffline, netip.AddrPort{}, "control: the peer is not running")
	assert.Len(t, p.history, maxHistory)
	assert.Equal(t, map[SwitchKey]uint64{
		{To: PathDirect, Reason: "ice_nominated"}: 25,
		{To: PathRelay, Reason: "direct_silent"}:  25,
		{To: PathOffline, Reason: "peer_offline"}: 1,
	}, c.snapshot())
}
