package fabric

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUDPSocketSemantics(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "full-cone"), 1)
	h := s.hosts[0]
	ctx := ctxT(t, 5*time.Second)

	a, err := h.ListenPacket(ctx, "udp4", ":7000")
	require.NoError(t, err)
	defer a.Close()

	t.Run("port in use", func(t *testing.T) {
		_, err := h.ListenPacket(ctx, "udp4", "192.168.1.2:7000")
		require.ErrorIs(t, err, syscall.EADDRINUSE)
		var oe *net.OpError
		require.ErrorAs(t, err, &oe)
	})
	t.Run("address not local", func(t *testing.T) {
		_, err := h.ListenPacket(ctx, "udp4", "192.168.1.77:0")
		require.ErrorIs(t, err, syscall.EADDRNOTAVAIL)
	})
	t.Run("larger than the MTU", func(t *testing.T) {
		_, err := a.WriteTo(make([]byte, 1473), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.100:9")))
		require.ErrorIs(t, err, syscall.EMSGSIZE)
		_, err = a.WriteTo(make([]byte, 1472), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.100:9")))
		require.NoError(t, err, "1472 bytes of payload fill a 1500-byte packet exactly")
	})
	t.Run("no route", func(t *testing.T) {
		w2 := newWorld(t, Config{})
		isolated, err := w2.f.AddHost(HostConfig{Name: "iso", Interfaces: []InterfaceConfig{{Network: "internet", Addr: ip("203.0.113.9")}}})
		require.NoError(t, err)
		pc, err := isolated.ListenPacket(ctx, "udp4", ":0")
		require.NoError(t, err)
		defer pc.Close()
		_, err = pc.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("10.1.1.1:9")))
		require.ErrorIs(t, err, syscall.ENETUNREACH)
	})
	t.Run("truncating read", func(t *testing.T) {
		b, err := h.ListenPacket(ctx, "udp4", ":7001")
		require.NoError(t, err)
		defer b.Close()
		_, err = a.WriteTo([]byte("0123456789"), b.LocalAddr())
		require.NoError(t, err)
		buf := make([]byte, 4)
		require.NoError(t, b.SetReadDeadline(time.Now().Add(time.Second)))
		n, from, err := b.ReadFrom(buf)
		require.NoError(t, err)
		assert.Equal(t, "0123", string(buf[:n]))
		assert.Equal(t, "127.0.0.1:7000", from.String(), "loopback datagrams come from 127.0.0.1")
	})
	t.Run("queue bound", func(t *testing.T) {
		b, err := h.ListenPacket(ctx, "udp4", "192.168.1.2:7002")
		require.NoError(t, err)
		defer b.Close()
		require.NoError(t, b.(interface{ SetReadBuffer(int) error }).SetReadBuffer(3000))
		before := h.udp.queueFull.Load()
		for range 5 {
			_, err = a.WriteTo(make([]byte, 1000), b.LocalAddr())
			require.NoError(t, err)
		}
		assert.Equal(t, uint64(2), h.udp.queueFull.Load()-before, "3 of 5 1000-byte datagrams fit 3000 bytes")
	})
	t.Run("write to connected", func(t *testing.T) {
		c, err := h.Dial(ctx, "udp4", "203.0.113.100:9")
		require.NoError(t, err)
		defer c.Close()
		assert.Equal(t, "192.168.1.2", c.LocalAddr().(*net.UDPAddr).IP.String(), "connect fixes the source address")
		_, err = c.(net.PacketConn).WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.100:10")))
		require.ErrorIs(t, err, net.ErrWriteToConnected)
	})
	t.Run("closed", func(t *testing.T) {
		c, err := h.ListenPacket(ctx, "udp4", ":0")
		require.NoError(t, err)
		done := make(chan error)
		go func() {
			_, _, err := c.ReadFrom(make([]byte, 10))
			done <- err
		}()
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, c.Close())
		require.ErrorIs(t, <-done, net.ErrClosed)
		require.ErrorIs(t, c.Close(), net.ErrClosed)
		// The port is free again.
		c2, err := h.ListenPacket(ctx, "udp4", c.LocalAddr().String())
		require.NoError(t, err)
		c2.Close()
	})
	t.Run("deadline moved later", func(t *testing.T) {
		c, err := h.ListenPacket(ctx, "udp4", ":0")
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
		require.NoError(t, c.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
		start := time.Now()
		_, _, err = c.ReadFrom(make([]byte, 10))
		var ne net.Error
		require.True(t, errors.As(err, &ne) && ne.Timeout(), "want a timeout, got %v", err)
		assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "the first deadline still fired")
	})
}

// TestUDPPortUnreachable: a datagram to a port nobody listens on is
// answered by the host's stack with ICMP port unreachable, which the NAT
// translates back; the router sees it forwarded.
func TestUDPClosedPortAnswered(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "full-cone"), 1)
	ctx := ctxT(t, 5*time.Second)
	c, err := s.hosts[0].ListenPacket(ctx, "udp4", ":0")
	require.NoError(t, err)
	defer c.Close()
	before := s.router.Stats().Forwarded
	_, err = c.WriteTo([]byte("anyone?"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.100:4444")))
	require.NoError(t, err)
	// Out through the NAT, and the port unreachable back in.
	require.Eventually(t, func() bool { return s.router.Stats().Forwarded-before >= 2 }, 2*time.Second, 5*time.Millisecond)
}

// TestNoChecksumErrors runs NATed UDP traffic and checks every datagram
// arrived with a valid checksum: the NAT's incremental updates are
// verified on every packet by the receiving host.
func TestNoChecksumErrors(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "symmetric"), 1)
	ctx := ctxT(t, 5*time.Second)
	spc, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:3478")
	require.NoError(t, err)
	defer spc.Close()
	go udpEcho(spc)
	c, err := s.hosts[0].ListenPacket(ctx, "udp4", ":0")
	require.NoError(t, err)
	defer c.Close()
	for range 50 {
		_, _, err := roundTrip(c, netip.MustParseAddrPort("203.0.113.100:3478"), "checksum me", time.Second)
		require.NoError(t, err)
	}
	assert.Zero(t, s.hosts[0].udp.badChecksum.Load())
	assert.Zero(t, w.server.udp.badChecksum.Load())
}
