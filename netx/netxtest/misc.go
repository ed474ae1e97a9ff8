package netxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testInterfaces checks that Server lists an interface carrying
// ServerAddr, and that the list is well formed.
func testInterfaces(t *testing.T, env Env) {
	ifs, err := env.Server.Interfaces()
	require.NoError(t, err)
	require.NotEmpty(t, ifs)

	indexes := map[int]string{}
	var carrier string
	for _, ifc := range ifs {
		assert.Positive(t, ifc.Index, "interface %q", ifc.Name)
		assert.NotEmpty(t, ifc.Name, "interface %d has no name", ifc.Index)
		if other, dup := indexes[ifc.Index]; dup {
			t.Errorf("interfaces %q and %q share index %d", other, ifc.Name, ifc.Index)
		}
		indexes[ifc.Index] = ifc.Name
		for _, p := range ifc.Addrs {
			assert.True(t, p.IsValid(), "interface %q has invalid prefix %v", ifc.Name, p)
			if p.Addr().Unmap().WithZone("") != env.ServerAddr.Unmap().WithZone("") {
				continue
			}
			carrier = ifc.Name
			assert.NotZero(t, ifc.Flags&net.FlagUp, "interface %q carrying %s is down", ifc.Name, env.ServerAddr)
			assert.Positive(t, ifc.MTU, "interface %q has no MTU", ifc.Name)
		}
	}
	assert.NotEmpty(t, carrier, "no interface carries ServerAddr %s: %+v", env.ServerAddr, ifs)

	_, err = env.Client.Interfaces()
	assert.NoError(t, err, "client interfaces")
}

// testConcurrent runs several TCP and UDP clients at once against one
// listener and one datagram socket; run under -race it also checks that
// the implementation is safe for concurrent use.
func testConcurrent(t *testing.T, env Env) {
	const (
		workers   = 8
		tcpBytes  = 64 << 10
		datagrams = 4
	)
	ctx := testContext(t)
	ln, err := env.Server.Listen(ctx, "tcp", hostPort(env.ServerAddr))
	require.NoError(t, err)
	closeOnCleanup(t, ln)
	pc, err := env.Server.ListenPacket(ctx, "udp", hostPort(env.ServerAddr))
	require.NoError(t, err)
	udpAddr := addrPort(t, pc.LocalAddr())
	startEcho(t, pc)

	var servers sync.WaitGroup
	servers.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // listener closed below
			}
			servers.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(opTimeout))
				_, _ = io.Copy(c, c)
			})
		}
	})
	defer servers.Wait()
	defer ln.Close()

	errs := make(chan error, 2*workers)
	var clients sync.WaitGroup
	for i := range workers {
		clients.Go(func() { errs <- tcpRoundTrip(ctx, env, ln.Addr().String(), tcpBytes) })
		clients.Go(func() { errs <- udpRoundTrips(ctx, env, udpAddr, i, datagrams) })
	}
	clients.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
}

func tcpRoundTrip(ctx context.Context, env Env, addr string, size int) error {
	c, err := env.Client.Dial(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(opTimeout)); err != nil {
		return err
	}
	payload := make([]byte, size)
	_, _ = rand.Read(payload)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		wrote <- err
	}()
	got := make([]byte, size)
	_, rerr := io.ReadFull(c, got)
	if err := <-wrote; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("read: %w", rerr)
	}
	if !bytes.Equal(payload, got) {
		return fmt.Errorf("tcp echo differs")
	}
	return nil
}

func udpRoundTrips(ctx context.Context, env Env, to netip.AddrPort, worker, count int) error {
	network, address := clientBind(env)
	pc, err := env.Client.ListenPacket(ctx, network, address)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer pc.Close()
	buf := make([]byte, 2*datagramSize)
	for i := range count {
		msg := fmt.Appendf(nil, "worker %d datagram %d", worker, i)
		deadline := time.Now().Add(opTimeout)
		for {
			if _, err := pc.WriteTo(msg, net.UDPAddrFromAddrPort(to)); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			if err := pc.SetReadDeadline(time.Now().Add(retryEvery)); err != nil {
				return err
			}
			n, _, err := pc.ReadFrom(buf)
			if isTimeout(err) && time.Now().Before(deadline) {
				continue
			}
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			if bytes.Equal(buf[:n], msg) {
				break
			}
			// A late echo of an earlier resend: read on.
		}
	}
	return nil
}

// testCloseUnblocks checks that Close ends operations blocked on the
// closed socket: the contract every component's shutdown relies on.
func testCloseUnblocks(t *testing.T, env Env) {
	tests := []struct {
		name string
		// open returns a blocking operation and the Close that must end it.
		open func(t *testing.T) (block func() error, closer io.Closer)
	}{
		{name: "Accept", open: func(t *testing.T) (func() error, io.Closer) {
			ln, err := env.Server.Listen(testContext(t), "tcp", hostPort(env.ServerAddr))
			require.NoError(t, err)
			return func() error {
				c, err := ln.Accept()
				if err == nil {
					_ = c.Close()
				}
				return err
			}, ln
		}},
		{name: "ReadFrom", open: func(t *testing.T) (func() error, io.Closer) {
			pc, err := env.Server.ListenPacket(testContext(t), "udp", hostPort(env.ServerAddr))
			require.NoError(t, err)
			return func() error {
				_, _, err := pc.ReadFrom(make([]byte, datagramSize))
				return err
			}, pc
		}},
		{name: "Read", open: func(t *testing.T) (func() error, io.Closer) {
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
			sc := await(t, accepted, opTimeout, "accept")
			require.NotNil(t, sc, "accept failed")
			closeOnCleanup(t, sc)
			return func() error {
				_, err := c.Read(make([]byte, 16))
				return err
			}, c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			block, closer := tt.open(t)
			done := make(chan error, 1)
			go func() { done <- block() }()
			stillBlocked(t, done, tt.name)
			require.NoError(t, closer.Close())
			err := await(t, done, promptly, tt.name+" after Close")
			assert.Error(t, err, "%s succeeded on a closed socket", tt.name)
		})
	}
}

// testBadNetwork: unknown or malformed network names are errors shaped like
// package net's (a *net.OpError), never a panic.
func testBadNetwork(t *testing.T, env Env) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	addr := netip.AddrPortFrom(env.ServerAddr, 1).String()
	for _, network := range []string{"", "ip", "tc", "unix", "tcpx", "udp9"} {
		var oe *net.OpError
		if c, err := env.Client.Dial(ctx, network, addr); assert.Error(t, err, "Dial %q", network) {
			assert.ErrorAs(t, err, &oe, "Dial %q", network)
		} else {
			c.Close()
		}
		if l, err := env.Server.Listen(ctx, network, addr); assert.Error(t, err, "Listen %q", network) {
			assert.ErrorAs(t, err, &oe, "Listen %q", network)
		} else {
			l.Close()
		}
		if pc, err := env.Server.ListenPacket(ctx, network, addr); assert.Error(t, err, "ListenPacket %q", network) {
			assert.ErrorAs(t, err, &oe, "ListenPacket %q", network)
		} else {
			pc.Close()
		}
	}
}
