package fabric

import (
	"io"

	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPingUDPTCPThroughNAT(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "port-restricted-cone"), 1)
	h := s.hosts[0]
	ctx := ctxT(t, 10*time.Second)

	rtt, err := h.Ping(ctx, serverIP)
	require.NoError(t, err, "ping server through NAT")
	assert.Less(t, rtt, time.Second)
	_, err = h.Ping(ctx, ip("192.168.1.1"))
	require.NoError(t, err, "ping own gateway")

	pc, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:3478")
	require.NoError(t, err)
	defer pc.Close()
	go udpEcho(pc)

	cpc, err := h.ListenPacket(ctx, "udp4", ":4000")
	require.NoError(t, err)
	defer cpc.Close()
	got, _, err := roundTrip(cpc, netip.MustParseAddrPort("203.0.113.100:3478"), "hi", 2*time.Second)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(got, "203.0.113.10:"), "server saw %s, want the NAT's public address", got)

	l, err := w.server.Listen(ctx, "tcp4", "203.0.113.100:80")
	require.NoError(t, err)
	defer l.Close()
	go tcpEcho(l)
	c, err := h.Dial(ctx, "tcp4", "203.0.113.100:80")
	require.NoError(t, err)
	defer c.Close()
	msg := strings.Repeat("lattice", 10000)
	go func() { _, _ = c.Write([]byte(msg)) }()
	buf := make([]byte, len(msg))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	assert.Equal(t, msg, string(buf))

	// Unsolicited inbound is filtered.
	_, err = w.server.Dial(ctxT(t, 500*time.Millisecond), "tcp4", "203.0.113.10:80")
	require.Error(t, err)
}
