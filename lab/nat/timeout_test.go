package nat

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	inside1 = ap("192.168.1.2:5000")
	remote1 = ap("198.51.100.7:3478")
	ext1    = ap("203.0.113.10:5000") // inside1's mapping under Preserve
)

// flow opens a mapping for one protocol and probes it with replies.
type flow struct {
	open  func(t *testing.T, n *NAT, now time.Time) // creates the mapping at now
	reply func() []byte                             // an inbound packet for the mapping
}

var (
	udpFlow = flow{
		open: func(t *testing.T, n *NAT, now time.Time) {
			_, res := sendOut(t, n, now, inside1, remote1)
			require.Equal(t, Forward, res.Verdict, res.Reason)
		},
		reply: func() []byte { return udpPkt(remote1, ext1) },
	}
	icmpFlow = flow{
		open: func(t *testing.T, n *NAT, now time.Time) {
			res := process(t, n, now, icmpEcho(icmpEchoRequest, inside1.Addr(), remote1.Addr(), 5000), FromInside)
			require.Equal(t, Forward, res.Verdict, res.Reason)
		},
		reply: func() []byte { return icmpEcho(icmpEchoReply, remote1.Addr(), public, 5000) },
	}
	// tcpHalfOpen has sent a SYN only: transitory.
	tcpHalfOpen = flow{
		open: func(t *testing.T, n *NAT, now time.Time) {
			res := process(t, n, now, tcpPkt(inside1, remote1, tcpSYN), FromInside)
			require.Equal(t, Forward, res.Verdict, res.Reason)
		},
		reply: func() []byte { return tcpPkt(remote1, ext1, tcpACK) },
	}
)

// tcpFlow performs a handshake, then the closing packets, all at now; the
// last outbound packet is the refresh the timeout counts from.
func tcpFlow(closing ...struct {
	dir   Direction
	flags uint8
}) flow {
	return flow{
		open: func(t *testing.T, n *NAT, now time.Time) {
			steps := append([]struct {
				dir   Direction
				flags uint8
			}{{FromInside, tcpSYN}, {FromOutside, tcpSYN | tcpACK}, {FromInside, tcpACK}}, closing...)
			for _, s := range steps {
				pkt := tcpPkt(inside1, remote1, s.flags)
				if s.dir == FromOutside {
					pkt = tcpPkt(remote1, ext1, s.flags)
				}
				res := process(t, n, now, pkt, s.dir)
				require.Equal(t, Forward, res.Verdict, res.Reason)
			}
		},
		reply: func() []byte { return tcpPkt(remote1, ext1, tcpACK) },
	}
}

func TestTimeouts(t *testing.T) {
	type step = struct {
		dir   Direction
		flags uint8
	}
	cfg := Config{
		UDPTimeout:            30 * time.Second,
		ICMPTimeout:           10 * time.Second,
		TCPEstablishedTimeout: time.Hour,
		TCPTransitoryTimeout:  time.Minute,
	}
	tests := []struct {
		name    string
		cfg     Config
		flow    flow
		timeout time.Duration
	}{
		{"udp", cfg, udpFlow, 30 * time.Second},
		{"udp default", Config{}, udpFlow, 2 * time.Minute},
		{"icmp", cfg, icmpFlow, 10 * time.Second},
		{"icmp default", Config{}, icmpFlow, 60 * time.Second},
		{"tcp syn-sent", cfg, tcpHalfOpen, time.Minute},
		{"tcp established", cfg, tcpFlow(), time.Hour},
		{"tcp established default", Config{}, tcpFlow(), 2*time.Hour + 4*time.Minute},
		{"tcp transitory default", Config{}, tcpHalfOpen, 4 * time.Minute},
		{"tcp one fin", cfg, tcpFlow(step{FromInside, tcpFIN | tcpACK}), time.Hour},
		{"tcp fin both ways", cfg, tcpFlow(step{FromOutside, tcpFIN | tcpACK}, step{FromInside, tcpFIN | tcpACK}), time.Minute},
		{"tcp rst from outside", cfg, tcpFlow(step{FromOutside, tcpRST}, step{FromInside, tcpACK}), time.Minute},
		{"tcp rst from inside", cfg, tcpFlow(step{FromInside, tcpRST}), time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, c := range []struct {
				at   time.Duration
				want Verdict
			}{{tt.timeout - time.Nanosecond, Forward}, {tt.timeout, Drop}} {
				n := newNAT(t, tt.cfg)
				tt.flow.open(t, n, t0)
				now := t0.Add(c.at)
				assert.Len(t, n.Mappings(now), int(1-c.want), "mappings at %v", c.at)
				res := process(t, n, now, tt.flow.reply(), FromOutside)
				assert.Equal(t, c.want, res.Verdict, "reply at %v: %s", c.at, res.Reason)
			}
		})
	}
}

func TestExpiryCounted(t *testing.T) {
	n := newNAT(t, Config{UDPTimeout: time.Minute})
	udpFlow.open(t, n, t0)
	_, res := sendIn(t, n, t0.Add(time.Minute), remote1, ext1)
	assert.Equal(t, "dropped by endpoint-independent filtering: no mapping for udp 198.51.100.7:3478 → 203.0.113.10:5000", res.Reason)
	s := n.Stats()
	assert.Equal(t, uint64(1), s.Expired)
	assert.Equal(t, uint64(1), s.DroppedNoMapping)
	assert.Empty(t, n.Mappings(t0.Add(time.Minute)))
}

func TestRefresh(t *testing.T) {
	const timeout = time.Minute
	tests := []struct {
		name    string
		refresh Refresh
		// what keeps the mapping busy at +50s
		dir Direction
		// whether it is still alive at +100s
		alive bool
	}{
		{"outbound refreshes outbound-only", RefreshOutbound, FromInside, true},
		{"inbound does not refresh outbound-only", RefreshOutbound, FromOutside, false},
		{"outbound refreshes both", RefreshBoth, FromInside, true},
		{"inbound refreshes both", RefreshBoth, FromOutside, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNAT(t, Config{UDPTimeout: timeout, Refresh: tt.refresh})
			udpFlow.open(t, n, t0)
			at := t0.Add(50 * time.Second)
			if tt.dir == FromInside {
				ext, _ := sendOut(t, n, at, inside1, remote1)
				require.Equal(t, ext1, ext)
			} else {
				dst, res := sendIn(t, n, at, remote1, ext1)
				require.Equal(t, inside1, dst, res.Reason)
			}
			_, res := sendIn(t, n, t0.Add(100*time.Second), remote1, ext1)
			assert.Equal(t, tt.alive, res.Verdict == Forward, res.Reason)
		})
	}
}

func TestFilteredInboundDoesNotRefresh(t *testing.T) {
	n := newNAT(t, Config{UDPTimeout: time.Minute, Refresh: RefreshBoth, Filtering: AddressAndPortDependent})
	udpFlow.open(t, n, t0)
	_, res := sendIn(t, n, t0.Add(50*time.Second), ap("192.0.2.1:1"), ext1)
	require.Equal(t, Drop, res.Verdict)
	_, res = sendIn(t, n, t0.Add(time.Minute), remote1, ext1)
	assert.Equal(t, Drop, res.Verdict, "a filtered packet must not refresh the mapping")
}

func TestExpiredMappingPortReused(t *testing.T) {
	// An expired mapping's port goes to whoever asks next, even before any
	// sweep has run.
	n := newNAT(t, Config{UDPTimeout: time.Minute, PortMin: 5000, PortMax: 5000})
	udpFlow.open(t, n, t0)
	ext, res := sendOut(t, n, t0.Add(time.Minute), ap("192.168.1.3:5000"), remote1)
	require.Equal(t, Forward, res.Verdict, res.Reason)
	assert.Equal(t, ext1, ext)
	dst, _ := sendIn(t, n, t0.Add(time.Minute), remote1, ext1)
	assert.Equal(t, netip.MustParseAddrPort("192.168.1.3:5000"), dst, "the port belongs to the new mapping")
}
