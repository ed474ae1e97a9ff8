package relay

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
)

// slowNet is netx.OS with adjustable extra delay: udp on every datagram
// sent (a slow or shaped UDP path), tcp on every TCP dial (a slow TCP
// handshake); tcpBlocked refuses TCP.
type slowNet struct {
	netx.Network
	udp, tcp   *atomic.Int64 // nanoseconds
	tcpBlocked bool
}

func newSlowNet() slowNet {
	return slowNet{Network: netx.OS, udp: new(atomic.Int64), tcp: new(atomic.Int64)}
}

func (n slowNet) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if n.tcpBlocked {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if d := time.Duration(n.tcp.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return n.Network.Dial(ctx, network, address)
}

func (n slowNet) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	pc, err := n.Network.ListenPacket(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return slowConn{pc, n.udp}, nil
}

type slowConn struct {
	net.PacketConn
	delay *atomic.Int64
}

func (c slowConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	if d := time.Duration(c.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	return c.PacketConn.WriteTo(b, addr)
}

func TestPick(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name      string
		quic, tcp time.Duration
		want      string
	}{
		{"equal: TCP", 2 * ms, 2 * ms, transportTCP},
		{"TCP one round trip longer, as by design: TCP", 40 * ms, 80 * ms, transportTCP},
		{"TCP longer by QUIC's length but under the slack: TCP", 2 * ms, 23 * ms, transportTCP},
		{"TCP longer by the slack but not QUIC's length: TCP", 100 * ms, 150 * ms, transportTCP},
		{"TCP longer by both (a SYN retransmitted): QUIC", 10 * ms, 1040 * ms, transportQUIC},
		{"QUIC slower: TCP", 50 * ms, 10 * ms, transportTCP},
		{"only QUIC connected", ms, 0, transportQUIC},
		{"only TCP connected", 0, ms, transportTCP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := pick(tt.quic, tt.tcp, 300*ms)
			assert.Equal(t, tt.want, got, why)
			assert.NotEmpty(t, why)
			// TestRacePicksByMeasurement reads a QUIC win's reason back.
			assert.Equal(t, got == transportQUIC && tt.tcp > 0, quicWon.MatchString(why), why)
		})
	}
}

// TestRacePicksByMeasurement: a race keeps the transport whose handshake
// measured faster, whichever connected first, and says why.
func TestRacePicksByMeasurement(t *testing.T) {
	s := startServer(t, ServerConfig{})
	tests := []struct {
		name    string
		edit    func(n slowNet) slowNet
		want    string
		wantWhy string
	}{
		{"UDP 100ms slower: TCP", func(n slowNet) slowNet { n.udp.Store(int64(100 * time.Millisecond)); return n }, transportTCP, "measured: TCP+TLS handshake"},
		{"TCP 200ms slower: QUIC", func(n slowNet) slowNet { n.tcp.Store(int64(200 * time.Millisecond)); return n }, transportQUIC, "measured: QUIC handshake"},
		{"TCP blocked: QUIC", func(n slowNet) slowNet { n.tcpBlocked = true; return n }, transportQUIC, "TCP did not connect within"},
		// Alike on the network, TCP is kept: its handshake is at most one
		// round trip longer. On a loaded machine TCP's can take its CPU
		// long enough (QUIC's is the heavier) that QUIC wins, by the rule.
		{"both alike: TCP unless QUIC measured faster by the rule", func(n slowNet) slowNet { return n }, transportTCP, "measured: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := tt.edit(newSlowNet())
			a := connectedClient(t, s, func(c *ClientConfig) { c.Network = n })
			why := a.TransportReason()
			assert.Contains(t, why, tt.wantWhy)
			if m := quicWon.FindStringSubmatch(why); m != nil && strings.HasPrefix(tt.name, "both alike") {
				quic, err1 := time.ParseDuration(m[1])
				tcp, err2 := time.ParseDuration(m[2])
				require.NoError(t, errors.Join(err1, err2), why)
				assert.Equal(t, transportQUIC, a.Transport(), why)
				assert.Equal(t, transportQUIC, mustPick(t, quic, tcp), "QUIC picked against the rule: %s", why)
			} else {
				assert.Equal(t, tt.want, a.Transport(), why)
			}
			b := connectedClient(t, s, nil)
			exchange(t, a, b, []byte("through the winner"))
			exchange(t, b, a, []byte("and back"))
		})
	}
}

// TestRaceRemeasures: a connected racing client measures again and moves
// to QUIC when its TCP path turns slow, and back to TCP when it recovers.
func TestRaceRemeasures(t *testing.T) {
	s := startServer(t, ServerConfig{})
	n := newSlowNet()
	a := connectedClient(t, s, func(c *ClientConfig) { c.Network, c.Remeasure = n, 100*time.Millisecond })
	b := connectedClient(t, s, nil)
	assert.Equal(t, transportTCP, a.Transport(), a.TransportReason())
	n.tcp.Store(int64(200 * time.Millisecond))
	eventually(t, 10*time.Second, func() bool { return a.Transport() == transportQUIC }, "never moved to QUIC: %s", a.TransportReason())
	assert.Contains(t, a.TransportReason(), "measured: QUIC handshake")
	exchange(t, a, b, []byte("over quic now"))
	n.tcp.Store(0)
	eventually(t, 10*time.Second, func() bool { return a.Transport() == transportTCP }, "never moved back to TCP: %s", a.TransportReason())
	exchange(t, b, a, []byte("over tcp again"))
}

// quicWon matches the reason of a race QUIC won by measurement.
var quicWon = regexp.MustCompile(`^measured: QUIC handshake (\S+) against TCP\+TLS's (\S+)$`)

// mustPick is pick's choice for the measured handshakes.
func mustPick(t *testing.T, quic, tcp time.Duration) string {
	t.Helper()
	got, _ := pick(quic, tcp, 0)
	return got
}
