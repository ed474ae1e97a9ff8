package fabric

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/lab/link"
	"github.com/latticelab/lattice/lab/pcapng"
)

// TestCloseStopsEverything runs traffic over impaired, captured links with
// sockets still open, closes the fabric mid-flight, and checks that every
// goroutine it started is gone and that using it afterwards fails cleanly.
func TestCloseStopsEverything(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	f, err := New(Config{Seed: 3})
	require.NoError(t, err)
	w := &world{f: f}
	_, err = f.AddNetwork(NetworkConfig{Name: "internet", Prefix: internet})
	require.NoError(t, err)
	w.server, err = f.AddHost(HostConfig{Name: "server", Interfaces: []InterfaceConfig{{Network: "internet", Addr: serverIP,
		Ingress: link.Impairments{Latency: 5 * time.Millisecond, Jitter: time.Millisecond, Loss: 0.01, Rate: 50e6}}}})
	require.NoError(t, err)
	s := w.addSite(t, profile(t, "symmetric"), 2)
	var capture bytes.Buffer
	pw, err := pcapng.NewWriter(&capture, pcapng.Options{})
	require.NoError(t, err)
	require.NoError(t, f.Network("internet").Capture(pw))

	ctx := ctxT(t, 5*time.Second)
	pc, err := w.server.ListenPacket(ctx, "udp4", ":3478")
	require.NoError(t, err)
	go udpEcho(pc)
	l, err := w.server.Listen(ctx, "tcp4", ":80")
	require.NoError(t, err)
	go tcpEcho(l)
	c, err := s.hosts[0].Dial(ctx, "tcp4", "203.0.113.100:80")
	require.NoError(t, err)
	go func() { _, _ = c.Write(make([]byte, 1<<20)) }()
	u, err := s.hosts[1].ListenPacket(ctx, "udp4", ":0")
	require.NoError(t, err)
	for range 100 {
		_, _ = u.WriteTo(make([]byte, 1000), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.100:3478")))
	}
	time.Sleep(20 * time.Millisecond) // frames in flight in every pipe

	require.NoError(t, f.Close())
	require.NoError(t, f.Close(), "Close is idempotent")
	require.NoError(t, pw.Close())
	require.Positive(t, capture.Len())

	_, err = f.AddHost(HostConfig{Name: "late", Interfaces: []InterfaceConfig{{Network: "internet", Addr: ip("203.0.113.9")}}})
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.hosts[0].Dial(ctx, "tcp4", "203.0.113.100:80")
	require.Error(t, err)
	_, err = u.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.100:3478")))
	require.ErrorIs(t, err, net.ErrClosed)
	c.Close()
	l.Close()
	pc.Close()
}
