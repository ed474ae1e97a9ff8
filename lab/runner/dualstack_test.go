package runner

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/fabric"
)

// twinWorld is a dual-stack segment with a server and a client.
func twinWorld(t *testing.T) (server, client *fabric.Host) {
	t.Helper()
	f, err := fabric.New(fabric.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "lan", Prefix: netip.MustParsePrefix("10.0.0.0/24"), Prefix6: netip.MustParsePrefix("2001:db8::/64")})
	require.NoError(t, err)
	host := func(name, v4, v6 string) *fabric.Host {
		h, err := f.AddHost(fabric.HostConfig{Name: name, Interfaces: []fabric.InterfaceConfig{
			{Network: "lan", Addr: netip.MustParseAddr(v4), Aliases: []netip.Addr{netip.MustParseAddr(v6)}}}})
		require.NoError(t, err)
		return h
	}
	return host("server", "10.0.0.2", "2001:db8::2"), host("client", "10.0.0.3", "2001:db8::3")
}

// TestTwinNetTCP: one Listen on the IPv4 address accepts over both
// families; an address without a twin listens once.
func TestTwinNetTCP(t *testing.T) {
	server, client := twinWorld(t)
	ctx := context.Background()
	v4, v6 := netip.MustParseAddrPort("10.0.0.2:443"), netip.MustParseAddrPort("[2001:db8::2]:443")
	n := withTwins(server, map[netip.AddrPort]netip.AddrPort{v4: v6, netip.MustParseAddrPort("10.0.0.2:80"): {}})
	ln, err := n.Listen(ctx, "tcp", v4.String())
	require.NoError(t, err)
	assert.Equal(t, v4.String(), ln.Addr().String())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	for _, to := range []netip.AddrPort{v4, v6} {
		c, err := client.Dial(ctx, "tcp", to.String())
		require.NoError(t, err, "dial %v", to)
		_, err = c.Write([]byte("hi"))
		require.NoError(t, err)
		buf := make([]byte, 2)
		_, err = io.ReadFull(c, buf)
		require.NoError(t, err, "echo over %v", to)
		require.NoError(t, c.Close())
	}
	plain, err := n.Listen(ctx, "tcp", "10.0.0.2:80")
	require.NoError(t, err)
	_, twin := plain.(*twinListener)
	assert.False(t, twin, "no twin given: one listener")
	require.NoError(t, plain.Close())

	require.NoError(t, ln.Close())
	require.NoError(t, ln.Close(), "idempotent")
	_, err = ln.Accept()
	assert.ErrorIs(t, err, net.ErrClosed)
	_, err = client.Dial(ctx, "tcp", v6.String())
	assert.Error(t, err, "the twin is closed too")
}

// TestTwinNetUDP: one ListenPacket reads from both families, answers each
// from its own address, and keeps read deadlines.
func TestTwinNetUDP(t *testing.T) {
	server, client := twinWorld(t)
	ctx := context.Background()
	v4, v6 := netip.MustParseAddrPort("10.0.0.2:3478"), netip.MustParseAddrPort("[2001:db8::2]:3478")
	pc, err := withTwins(server, map[netip.AddrPort]netip.AddrPort{v4: v6}).ListenPacket(ctx, "udp", v4.String())
	require.NoError(t, err)
	defer pc.Close()
	cl, err := client.ListenPacket(ctx, "udp", "[::]:5000")
	require.NoError(t, err)
	defer cl.Close()
	buf := make([]byte, 64)
	for _, to := range []netip.AddrPort{v4, v6} {
		_, err := cl.WriteTo([]byte("ping"), net.UDPAddrFromAddrPort(to))
		require.NoError(t, err)
		require.NoError(t, pc.SetReadDeadline(time.Now().Add(time.Second)))
		n, from, err := pc.ReadFrom(buf)
		require.NoError(t, err, "to %v", to)
		assert.Equal(t, "ping", string(buf[:n]))
		_, err = pc.WriteTo([]byte("pong"), from)
		require.NoError(t, err)
		require.NoError(t, cl.SetReadDeadline(time.Now().Add(time.Second)))
		n, reply, err := cl.ReadFrom(buf)
		require.NoError(t, err)
		assert.Equal(t, "pong", string(buf[:n]))
		assert.Equal(t, to, reply.(*net.UDPAddr).AddrPort(), "answered from the address asked")
	}
	require.NoError(t, pc.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, _, err = pc.ReadFrom(buf)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)

	// A deadline set while a read waits applies to it.
	read := make(chan error, 1)
	require.NoError(t, pc.SetReadDeadline(time.Time{}))
	go func() { _, _, err := pc.ReadFrom(buf); read <- err }()
	time.Sleep(10 * time.Millisecond) // let the read start waiting: either order passes
	require.NoError(t, pc.SetReadDeadline(time.Now()))
	select {
	case err := <-read:
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting read never saw the new deadline")
	}
	require.NoError(t, pc.Close())
	_, _, err = pc.ReadFrom(buf)
	assert.True(t, errors.Is(err, net.ErrClosed), "%v", err)
}
