package fabric_test

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
)

// TestHostPMTU: an in-process host's first 1400-byte datagram across a
// 1280-byte internet is lost to ICMP fragmentation needed; the host keeps
// the path MTU, so the next one leaves in fragments, crosses the NAT and
// arrives whole, as from a Linux socket.
func TestHostPMTU(t *testing.T) {
	f, err := fabric.New(fabric.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "internet", Prefix: netip.MustParsePrefix("203.0.113.0/24"), MTU: 1280})
	require.NoError(t, err)
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "lan", Prefix: netip.MustParsePrefix("192.168.1.0/24")})
	require.NoError(t, err)
	cfg, err := nat.Profile("full-cone")
	require.NoError(t, err)
	_, err = f.AddRouter(fabric.RouterConfig{Name: "gw", Uplink: "wan", NAT: &cfg, Interfaces: []fabric.InterfaceConfig{
		{Name: "lan", Network: "lan", Addr: netip.MustParseAddr("192.168.1.1")},
		{Name: "wan", Network: "internet", Addr: netip.MustParseAddr("203.0.113.1")},
	}})
	require.NoError(t, err)
	server, err := f.AddHost(fabric.HostConfig{Name: "server", Interfaces: []fabric.InterfaceConfig{
		{Network: "internet", Addr: netip.MustParseAddr("203.0.113.100")}}})
	require.NoError(t, err)
	pc, err := f.AddHost(fabric.HostConfig{Name: "pc", Gateway: netip.MustParseAddr("192.168.1.1"), Interfaces: []fabric.InterfaceConfig{
		{Network: "lan", Addr: netip.MustParseAddr("192.168.1.2")}}})
	require.NoError(t, err)

	ln, err := server.ListenPacket(t.Context(), "udp4", "203.0.113.100:7000")
	require.NoError(t, err)
	defer ln.Close()
	c, err := pc.ListenPacket(t.Context(), "udp4", ":0")
	require.NoError(t, err)
	defer c.Close()
	dst := net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.100:7000"))
	msg := bytes.Repeat([]byte{0xab}, 1400)
	buf := make([]byte, 4096)

	_, err = c.WriteTo(msg, dst)
	require.NoError(t, err)
	require.NoError(t, ln.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, _, err = ln.ReadFrom(buf)
	require.Error(t, err, "the first datagram, DF set, is too big for the internet")
	require.Eventually(t, func() bool { return f.Router("gw").Stats().ICMPSent == 1 }, 5*time.Second, 5*time.Millisecond)

	var n int
	require.Eventually(t, func() bool {
		if _, err := c.WriteTo(msg, dst); err != nil {
			return false
		}
		_ = ln.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		var rerr error
		n, _, rerr = ln.ReadFrom(buf)
		return rerr == nil
	}, 5*time.Second, time.Millisecond)
	assert.Equal(t, msg, buf[:n])
	assert.Equal(t, uint64(1), f.Router("gw").Stats().ICMPSent, "no more ICMP: the host fragments now")
	assert.Positive(t, f.Router("gw").NAT().Stats().Fragments)
}

// TestUDPConnRefused: a connected UDP socket on a lab host learns from the
// port unreachable the far host answers that nothing listens there: its
// next read fails with ECONNREFUSED, as on Linux; an unconnected socket
// hears nothing.
func TestUDPConnRefused(t *testing.T) {
	f, err := fabric.New(fabric.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "internet", Prefix: netip.MustParsePrefix("203.0.113.0/24")})
	require.NoError(t, err)
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "lan", Prefix: netip.MustParsePrefix("192.168.1.0/24")})
	require.NoError(t, err)
	cfg, err := nat.Profile("port-restricted-cone")
	require.NoError(t, err)
	_, err = f.AddRouter(fabric.RouterConfig{Name: "gw", Uplink: "wan", NAT: &cfg, Interfaces: []fabric.InterfaceConfig{
		{Name: "lan", Network: "lan", Addr: netip.MustParseAddr("192.168.1.1")},
		{Name: "wan", Network: "internet", Addr: netip.MustParseAddr("203.0.113.1")},
	}})
	require.NoError(t, err)
	_, err = f.AddHost(fabric.HostConfig{Name: "server", Interfaces: []fabric.InterfaceConfig{
		{Network: "internet", Addr: netip.MustParseAddr("203.0.113.100")}}})
	require.NoError(t, err)
	pc, err := f.AddHost(fabric.HostConfig{Name: "pc", Gateway: netip.MustParseAddr("192.168.1.1"), Interfaces: []fabric.InterfaceConfig{
		{Network: "lan", Addr: netip.MustParseAddr("192.168.1.2")}}})
	require.NoError(t, err)

	c, err := pc.Dial(t.Context(), "udp4", "203.0.113.100:9999") // nothing listens there; behind the NAT
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("anyone?"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Read(make([]byte, 100))
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	_, err = c.Write([]byte("again"))
	require.NoError(t, err, "the error is reported once")

	u, err := pc.ListenPacket(t.Context(), "udp4", ":0")
	require.NoError(t, err)
	defer u.Close()
	_, err = u.WriteTo([]byte("anyone?"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.100:9999")))
	require.NoError(t, err)
	require.NoError(t, u.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, _, err = u.ReadFrom(make([]byte, 100))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "unconnected: no error")
}
