package netstack

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
)

func TestNew(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		wantMTU   int
		wantBatch int
		wantErr   string
	}{
		{name: "defaults", cfg: Config{Address: addrA}, wantMTU: DefaultMTU, wantBatch: BatchSize},
		{name: "small batch", cfg: Config{Address: addrA, Batch: 16}, wantMTU: DefaultMTU, wantBatch: 16},
		{name: "batch too large", cfg: Config{Address: addrA, Batch: BatchSize + 1}, wantErr: "netstack: batch 65: want 1..64"},
		{name: "negative batch", cfg: Config{Address: addrA, Batch: -1}, wantErr: "netstack: batch -1: want 1..64"},
		{name: "IPv6", cfg: Config{Address: addrA6, MTU: 1280}, wantMTU: 1280},
		{name: "jumbo", cfg: Config{Address: addrA, MTU: 9000, Logger: slog.New(slog.DiscardHandler)}, wantMTU: 9000},
		{name: "no address", cfg: Config{}, wantErr: "netstack: Config.Address is required"},
		{name: "MTU too small", cfg: Config{Address: addrA, MTU: 576}, wantErr: "netstack: MTU 576: want 1280..65535"},
		{name: "MTU too large", cfg: Config{Address: addrA, MTU: 65536}, wantErr: "netstack: MTU 65536: want 1280..65535"},
		{name: "IPv4-mapped", cfg: Config{Address: netip.MustParsePrefix("::ffff:100.64.1.2/106")}, wantErr: "netstack: address ::ffff:100.64.1.2/106: want an IPv4 or IPv6 address, not IPv4-mapped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.cfg)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			defer s.Close()
			mtu, err := s.TUN().MTU()
			require.NoError(t, err)
			assert.Equal(t, tt.wantMTU, mtu)
			if tt.wantBatch != 0 {
				assert.Equal(t, tt.wantBatch, s.TUN().BatchSize(), "wireguard-go's buffers per read path")
			}
			assert.Equal(t, tt.cfg.Address, s.Address())
		})
	}
	_, err := New(Config{})
	assert.ErrorIs(t, err, ErrNoAddress)
}

func TestInterfaces(t *testing.T) {
	s := newStack(t, addrA)
	ifs, err := s.Interfaces()
	require.NoError(t, err)
	assert.Equal(t, []netx.Interface{
		{Index: 1, Name: "lo", MTU: 65536, Flags: net.FlagUp | net.FlagLoopback | net.FlagRunning,
			Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128")}},
		{Index: 2, Name: "wg0", MTU: DefaultMTU, Flags: net.FlagUp | net.FlagPointToPoint | net.FlagRunning,
			Addrs: []netip.Prefix{addrA}},
	}, ifs)
}

// TestLoopback talks to 127.0.0.1 inside one Stack: nothing leaves it.
func TestLoopback(t *testing.T) {
	s := newStack(t, addrA)
	ctx := ctxT(t, 10*time.Second)
	ln, err := s.Listen(ctx, "tcp4", "localhost:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = c.Write([]byte("hello"))
			c.Close()
		}
	}()
	c, err := s.Dial(ctx, "tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(got))
	assert.Zero(t, s.TUN().Stats().OutPackets, "loopback traffic reached the overlay")
}

func TestAddresses(t *testing.T) {
	s4, s6 := newStack(t, addrA), newStack(t, addrA6)
	tests := []struct {
		name             string
		s                *Stack
		network, address string
		want             string // the listener's address
		wantErr          string
	}{
		{name: "any port", s: s4, network: "tcp", address: ":0", want: "0.0.0.0"},
		{name: "overlay", s: s4, network: "tcp4", address: "100.64.1.2:0", want: "100.64.1.2"},
		{name: "localhost", s: s4, network: "tcp", address: "localhost:0", want: "127.0.0.1"},
		{name: "localhost v6", s: s6, network: "tcp", address: "localhost:0", want: "::1"},
		{name: "any v6", s: s6, network: "tcp", address: ":0", want: "::"},
		{name: "family from network", s: s4, network: "tcp6", address: ":0", want: "::"},
		{name: "mapped", s: s4, network: "tcp", address: "[::ffff:100.64.1.2]:0", want: "100.64.1.2"},
		{name: "family mismatch", s: s4, network: "tcp6", address: "100.64.1.2:0", wantErr: "listen tcp6: address 100.64.1.2:0: address family mismatch"},
		{name: "host name", s: s4, network: "tcp", address: "example.com:80", wantErr: `listen tcp: "example.com": ` + netx.ErrNoResolver.Error()},
		{name: "bad port", s: s4, network: "tcp", address: "100.64.1.2:http", wantErr: "listen tcp: address 100.64.1.2:http: invalid port"},
		{name: "no port", s: s4, network: "tcp", address: "100.64.1.2", wantErr: "listen tcp: address 100.64.1.2: missing port in address"},
		{name: "not ours", s: s4, network: "tcp", address: "100.64.1.9:0", wantErr: "listen tcp 100.64.1.9:0: bad local address"},
		{name: "bad network", s: s4, network: "sctp", address: ":0", wantErr: "listen sctp: unknown network sctp"},
	}
	pc, err := s4.ListenPacket(context.Background(), "udp", ":0")
	require.NoError(t, err)
	defer pc.Close()
	assert.Equal(t, "0.0.0.0", pc.LocalAddr().(*net.UDPAddr).AddrPort().Addr().String())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := tt.s.Listen(context.Background(), tt.network, tt.address)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				var oe *net.OpError
				assert.ErrorAs(t, err, &oe)
				return
			}
			require.NoError(t, err)
			defer ln.Close()
			ap, err := netip.ParseAddrPort(ln.Addr().String())
			require.NoError(t, err)
			assert.Equal(t, tt.want, ap.Addr().String())
		})
	}
}

// TestWriteTo checks the address forms a Stack's datagram sockets take.
func TestWriteTo(t *testing.T) {
	s := newStack(t, addrA)
	ctx := ctxT(t, 10*time.Second)
	rx, err := s.ListenPacket(ctx, "udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer rx.Close()
	tx, err := s.ListenPacket(ctx, "udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer tx.Close()
	to := rx.LocalAddr().String()
	mapped := net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom16(netip.MustParseAddr("127.0.0.1").As16()), rx.LocalAddr().(*net.UDPAddr).AddrPort().Port()))
	for _, addr := range []net.Addr{rx.LocalAddr(), stringAddr(to), mapped} {
		_, err := tx.WriteTo([]byte("x"), addr)
		require.NoError(t, err, "WriteTo %T %v", addr, addr)
		require.NoError(t, rx.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, from, err := rx.ReadFrom(make([]byte, 8))
		require.NoError(t, err)
		assert.Equal(t, tx.LocalAddr().String(), from.String())
	}
	var oe *net.OpError
	_, err = tx.WriteTo([]byte("x"), nil)
	assert.ErrorAs(t, err, &oe)
	_, err = tx.WriteTo([]byte("x"), stringAddr("nonsense"))
	assert.ErrorAs(t, err, &oe)
	_, err = tx.WriteTo([]byte("x"), (*net.UDPAddr)(nil))
	assert.ErrorAs(t, err, &oe)
}

type stringAddr string

func (a stringAddr) Network() string { return "udp" }
func (a stringAddr) String() string  { return string(a) }

// TestClose checks that Close ends the Stack's sockets and that the Stack
// refuses work afterwards.
func TestClose(t *testing.T) {
	s, err := New(Config{Address: addrA})
	require.NoError(t, err)
	ctx := ctxT(t, 10*time.Second)
	ln, err := s.Listen(ctx, "tcp", ":0")
	require.NoError(t, err)
	accepted := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		accepted <- err
	}()
	read := make(chan error, 1)
	go func() {
		_, err := s.TUN().Read([][]byte{make([]byte, 2048)}, []int{0}, 0)
		read <- err
	}()

	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "second Close")
	select {
	case err := <-accepted:
		assert.Error(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end Accept")
	}
	select {
	case err := <-read:
		assert.ErrorIs(t, err, os.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the adapter's Read")
	}

	var oe *net.OpError
	_, err = s.Dial(ctx, "tcp", "100.64.1.3:80")
	assert.ErrorAs(t, err, &oe)
	assert.ErrorIs(t, err, ErrClosed)
	_, err = s.Listen(ctx, "tcp", ":0")
	assert.ErrorIs(t, err, ErrClosed)
	_, err = s.ListenPacket(ctx, "udp", ":0")
	assert.ErrorIs(t, err, ErrClosed)
	_, err = s.Interfaces()
	assert.ErrorIs(t, err, ErrClosed)
}

// TestDialUnreachable dials a peer WireGuard has no route for: the dial
// ends with its context.
func TestDialUnreachable(t *testing.T) {
	a, _ := wgPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := a.Dial(ctx, "tcp", blackhole.String())
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	var oe *net.OpError
	assert.ErrorAs(t, err, &oe)
}
