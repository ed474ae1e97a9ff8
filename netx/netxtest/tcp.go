package netxtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
)

// echoPayload is large enough to cross many segments and fill the
// send and receive windows of both sides.
const echoPayload = 1 << 20

// testTCPEcho sends 1 MiB each way over one connection: the acceptor
// echoes every byte and then sends the SHA-256 of what it received, and
// the dialer checks both the echo and the digest.
func testTCPEcho(t *testing.T, env Env) {
	tests := []struct {
		name             string
		dialer, listener netx.Network
		listenAddr       netip.Addr
	}{
		{name: "client dials server", dialer: env.Client, listener: env.Server, listenAddr: env.ServerAddr},
		{name: "server dials client", dialer: env.Server, listener: env.Client, listenAddr: env.ClientAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.listenAddr.IsValid() {
				t.Skip("Env.ClientAddr is zero")
			}
			ctx := testContext(t)
			ln, err := tt.listener.Listen(ctx, "tcp", hostPort(tt.listenAddr))
			require.NoError(t, err)
			closeOnCleanup(t, ln)

			served := make(chan error, 1)
			go func() { served <- serveEchoDigest(ln) }()

			c, err := tt.dialer.Dial(ctx, "tcp", ln.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.SetDeadline(time.Now().Add(opTimeout)))

			payload := make([]byte, echoPayload)
			_, _ = rand.Read(payload)
			want := sha256.Sum256(payload)

			// Write while reading: the echo would stall once both
			// directions' buffers fill if we wrote everything first.
			wrote := make(chan error, 1)
			go func() {
				_, err := c.Write(payload)
				wrote <- err
			}()
			got := make([]byte, echoPayload+sha256.Size)
			_, err = io.ReadFull(c, got)
			require.NoError(t, await(t, wrote, opTimeout, "write"))
			require.NoError(t, err)
			require.NoError(t, await(t, served, opTimeout, "echo server"))

			assert.Equal(t, want, sha256.Sum256(got[:echoPayload]), "echoed data differs")
			assert.Equal(t, want[:], got[echoPayload:], "server received different data")
		})
	}
}

// serveEchoDigest accepts one connection, echoes echoPayload bytes and
// writes the SHA-256 of what it read.
func serveEchoDigest(ln net.Listener) error {
	c, err := ln.Accept()
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(opTimeout)); err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.CopyN(c, io.TeeReader(c, h), echoPayload); err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	if _, err := c.Write(h.Sum(nil)); err != nil {
		return fmt.Errorf("write digest: %w", err)
	}
	return nil
}

// testListenPortZero checks that port 0 is replaced by a real port,
// reported by Addr/LocalAddr and reachable from Client.
func testListenPortZero(t *testing.T, env Env) {
	fam := family(env.ServerAddr)
	for _, network := range []string{"tcp", "tcp" + fam, "udp", "udp" + fam} {
		t.Run(network, func(t *testing.T) {
			ctx := testContext(t)
			if network[:3] == "tcp" {
				ln, err := env.Server.Listen(ctx, network, hostPort(env.ServerAddr))
				require.NoError(t, err)
				closeOnCleanup(t, ln)
				bound := checkBound(t, env, ln.Addr())
				_, perr := netip.ParseAddrPort(ln.Addr().String())
				assert.NoError(t, perr, "listener address %q must parse as ip:port", ln.Addr())

				accepted := make(chan error, 1)
				go func() {
					c, err := ln.Accept()
					if err == nil {
						err = c.Close()
					}
					accepted <- err
				}()
				c, err := env.Client.Dial(ctx, network, bound.String())
				require.NoError(t, err, "dial the reported port")
				assert.NoError(t, c.Close())
				assert.NoError(t, await(t, accepted, opTimeout, "accept"))
				return
			}
			pc, err := env.Server.ListenPacket(ctx, network, hostPort(env.ServerAddr))
			require.NoError(t, err)
			closeOnCleanup(t, pc)
			bound := checkBound(t, env, pc.LocalAddr())
			startEcho(t, pc)
			exchange(t, listenClient(t, env), bound)
		})
	}
}

func checkBound(t *testing.T, env Env, a net.Addr) netip.AddrPort {
	t.Helper()
	ap := addrPort(t, a)
	assert.NotZero(t, ap.Port(), "port 0 was not replaced")
	assert.Equal(t, env.ServerAddr.Unmap(), ap.Addr(), "bound to another address")
	return ap
}

// testDialClosedPort dials a port nobody listens on: the dial must fail,
// promptly, with a *net.OpError.
func testDialClosedPort(t *testing.T, env Env) {
	ctx := testContext(t)
	ln, err := env.Server.Listen(ctx, "tcp", hostPort(env.ServerAddr))
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	start := time.Now()
	c, err := env.Client.Dial(ctx, "tcp", addr)
	elapsed := time.Since(start)
	if err == nil {
		_ = c.Close()
		t.Fatalf("dial %s succeeded after its listener closed", addr)
	}
	assert.Less(t, elapsed, promptly, "refused dial took too long")
	var opErr *net.OpError
	assert.ErrorAs(t, err, &opErr, "dial error %q (%T) is not a *net.OpError", err, err)
}

// testDialContextEnds dials Env.Blackhole and ends the context: the dial
// must give up promptly and report why.
func testDialContextEnds(t *testing.T, env Env) {
	if !env.Blackhole.IsValid() {
		t.Skip("Env.Blackhole is zero")
	}
	const after = 100 * time.Millisecond
	tests := []struct {
		name string
		ctx  func(t *testing.T) context.Context
		// ended reports whether the dial error tells why it ended.
		ended func(error) bool
	}{
		{name: "cancel", ended: func(err error) bool { return errors.Is(err, context.Canceled) }, ctx: func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			timer := time.AfterFunc(after, cancel)
			t.Cleanup(func() { timer.Stop(); cancel() })
			return ctx
		}},
		// A dialer may enforce the deadline itself (package net sets it on
		// the socket) and report a timeout rather than the context's error.
		{name: "deadline", ended: isTimeout, ctx: func(t *testing.T) context.Context {
			ctx, cancel := context.WithTimeout(t.Context(), after)
			t.Cleanup(cancel)
			return ctx
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// start before the context's timer exists, so a pause
			// between the two cannot make the dial look early.
			start := time.Now()
			ctx := tt.ctx(t)
			c, err := env.Client.Dial(ctx, "tcp", env.Blackhole.String())
			elapsed := time.Since(start)
			if err == nil {
				_ = c.Close()
				t.Fatalf("dial to blackhole %s succeeded", env.Blackhole)
			}
			require.GreaterOrEqual(t, elapsed, after-10*time.Millisecond,
				"dial failed before the context ended (%v): Blackhole is not silent", err)
			assert.Less(t, elapsed, after+promptly, "dial outlived its context")
			assert.True(t, tt.ended(err), "dial error %q (%T) does not report why the dial ended", err, err)
			var oe *net.OpError
			assert.ErrorAs(t, err, &oe, "a dial that ended with its context must still be a *net.OpError")
		})
	}
}

// readTimeout runs read after setting a short read deadline and checks
// that the read fails with a timeout, not early and not late.
func readTimeout(t *testing.T, setDeadline func(time.Time) error, read func() error) {
	t.Helper()
	const wait = 50 * time.Millisecond
	start := time.Now()
	require.NoError(t, setDeadline(start.Add(wait)))
	done := make(chan error, 1)
	go func() { done <- read() }()
	err := await(t, done, promptly, "read past its deadline")
	elapsed := time.Since(start)
	require.Error(t, err, "read succeeded on a silent connection")
	var ne net.Error
	if assert.ErrorAs(t, err, &ne, "deadline error %q (%T) is not a net.Error", err, err) {
		assert.True(t, ne.Timeout(), "deadline error %q does not report Timeout", err)
	}
	assert.GreaterOrEqual(t, elapsed, wait-5*time.Millisecond, "read returned before its deadline")
}

// SinkDigest accepts one connection on l, reads it to EOF and sends the
// SHA-256 of what arrived; nothing if Accept fails (l closed). It is the
// receiving end of the hashed transfers the tests of netx's Networks run.
func SinkDigest(l net.Listener) <-chan [32]byte {
	sum := make(chan [32]byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		h := sha256.New()
		_, _ = io.Copy(h, c)
		sum <- [32]byte(h.Sum(nil))
	}()
	return sum
}
