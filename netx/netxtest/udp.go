package netxtest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// datagramSize is a typical ICE/WireGuard datagram, below every MTU the
// lab uses, so no test depends on fragmentation.
const datagramSize = 1200

// retryEvery is how long a UDP test waits for a reply before resending:
// datagrams may be lost (a first packet can wait for neighbour
// resolution), and the suite must not mistake that for a broken Network.
const retryEvery = 200 * time.Millisecond

// testUDPEcho sends a datagram from Client to Server and back, and checks
// the source address each side sees.
func testUDPEcho(t *testing.T, env Env) {
	ctx := testContext(t)
	server, err := env.Server.ListenPacket(ctx, "udp", hostPort(env.ServerAddr))
	require.NoError(t, err)
	serverAddr := addrPort(t, server.LocalAddr())
	seen := startEcho(t, server)

	client := listenClient(t, env)
	clientAddr := addrPort(t, client.LocalAddr())
	exchange(t, client, serverAddr)
	src := await(t, seen, opTimeout, "server's view of the client")

	assert.Equal(t, clientAddr.Port(), src.Port(), "server saw another source port")
	if env.ClientAddr.IsValid() {
		assert.Equal(t, env.ClientAddr.Unmap(), src.Addr(), "server saw another source address")
	} else {
		assert.False(t, src.Addr().IsUnspecified(), "server saw an unspecified source address")
	}
}

// testUDPDial uses a connected UDP socket from Dial, the form pion and
// DNS-style clients use.
func testUDPDial(t *testing.T, env Env) {
	ctx := testContext(t)
	server, err := env.Server.ListenPacket(ctx, "udp", hostPort(env.ServerAddr))
	require.NoError(t, err)
	serverAddr := addrPort(t, server.LocalAddr())
	seen := startEcho(t, server)

	c, err := env.Client.Dial(ctx, "udp", serverAddr.String())
	require.NoError(t, err)
	closeOnCleanup(t, c)
	assert.Equal(t, serverAddr, addrPort(t, c.RemoteAddr()))

	msg := bytes.Repeat([]byte{'d'}, datagramSize)
	buf := make([]byte, 2*datagramSize)
	deadline := time.Now().Add(opTimeout)
	for {
		_, err := c.Write(msg)
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(retryEvery)))
		n, err := c.Read(buf)
		if isTimeout(err) && time.Now().Before(deadline) {
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, msg, buf[:n])
		break
	}
	src := await(t, seen, opTimeout, "server's view of the client")
	local := addrPort(t, c.LocalAddr())
	assert.Equal(t, local.Port(), src.Port(), "server saw another source port")
	if !local.Addr().IsUnspecified() {
		assert.Equal(t, local.Addr(), src.Addr(), "server saw another source address")
	}
}

// listenClient opens a datagram socket on Client (see clientBind).
func listenClient(t *testing.T, env Env) net.PacketConn {
	t.Helper()
	network, address := clientBind(env)
	pc, err := env.Client.ListenPacket(testContext(t), network, address)
	require.NoError(t, err)
	closeOnCleanup(t, pc)
	return pc
}

// startEcho echoes every datagram pc receives back to its sender and
// reports each sender on the returned channel (dropping reports nobody
// reads). It closes pc and waits for the echo goroutine at cleanup.
func startEcho(t *testing.T, pc net.PacketConn) <-chan netip.AddrPort {
	t.Helper()
	seen := make(chan netip.AddrPort, 64)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return // closed at cleanup
			}
			if ap, err := netip.ParseAddrPort(from.String()); err == nil {
				select {
				case seen <- netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port()):
				default:
				}
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	})
	t.Cleanup(func() {
		_ = pc.Close()
		wg.Wait()
	})
	return seen
}

// exchange sends a datagram from pc to an echo server at to, resending
// until the echo arrives, and checks the echo's payload and source.
func exchange(t *testing.T, pc net.PacketConn, to netip.AddrPort) {
	t.Helper()
	msg := make([]byte, datagramSize)
	for i := range msg {
		msg[i] = byte(i)
	}
	buf := make([]byte, 2*datagramSize)
	deadline := time.Now().Add(opTimeout)
	for {
		_, err := pc.WriteTo(msg, net.UDPAddrFromAddrPort(to))
		require.NoError(t, err, "write to %s", to)
		require.NoError(t, pc.SetReadDeadline(time.Now().Add(retryEvery)))
		n, from, err := pc.ReadFrom(buf)
		if isTimeout(err) && time.Now().Before(deadline) {
			continue
		}
		require.NoError(t, err, "no echo from %s", to)
		assert.Equal(t, msg, buf[:n], "echo payload differs")
		assert.Equal(t, to, addrPort(t, from), "echo came from another address")
		require.NoError(t, pc.SetReadDeadline(time.Time{}))
		return
	}
}

// isTimeout reports a deadline expiry: a net.Error with Timeout, which
// includes context.DeadlineExceeded and os.ErrDeadlineExceeded.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, context.DeadlineExceeded)
}

// testReadDeadline lets a read run into its deadline, then checks that
// clearing the deadline makes the socket usable again.
func testReadDeadline(t *testing.T, env Env) {
	t.Run("udp", func(t *testing.T) {
		ctx := testContext(t)
		pc, err := env.Server.ListenPacket(ctx, "udp", hostPort(env.ServerAddr))
		require.NoError(t, err)
		closeOnCleanup(t, pc)
		buf := make([]byte, datagramSize)
		readTimeout(t, pc.SetReadDeadline, func() error {
			_, _, err := pc.ReadFrom(buf)
			return err
		})
		require.NoError(t, pc.SetReadDeadline(time.Time{}))
		bound := addrPort(t, pc.LocalAddr())
		startEcho(t, pc)
		exchange(t, listenClient(t, env), bound)
	})
	t.Run("tcp", func(t *testing.T) {
		ctx := testContext(t)
		ln, err := env.Server.Listen(ctx, "tcp", hostPort(env.ServerAddr))
		require.NoError(t, err)
		closeOnCleanup(t, ln)
		accepted := make(chan net.Conn, 1)
		go func() {
			c, _ := ln.Accept()
			accepted <- c
		}()
		c, err := env.Client.Dial(ctx, "tcp", ln.Addr().String())
		require.NoError(t, err)
		closeOnCleanup(t, c)
		sc := await(t, accepted, opTimeout, "accept")
		require.NotNil(t, sc, "accept failed")
		closeOnCleanup(t, sc)

		buf := make([]byte, 16)
		readTimeout(t, sc.SetReadDeadline, func() error {
			_, err := sc.Read(buf)
			return err
		})
		require.NoError(t, sc.SetReadDeadline(time.Now().Add(opTimeout)))
		_, err = c.Write([]byte("x"))
		require.NoError(t, err)
		n, err := sc.Read(buf)
		require.NoError(t, err, "read after clearing the deadline")
		assert.Equal(t, "x", string(buf[:n]))
	})
}
