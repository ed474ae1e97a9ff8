package stun_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	pion "github.com/pion/stun/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/stun"
)

func TestBind(t *testing.T) {
	s := plainServer(t)
	c := client(t)
	// Traffic that is not the answer, already queued on the socket, must
	// be skipped: a node's socket also carries WireGuard and ICE.
	other := client(t)
	send(t, other, localAddr(t, c), []byte("wireguard"))
	send(t, other, localAddr(t, c), build(t, pion.BindingSuccess).Raw)

	mapped, err := stun.Bind(ctxT(t, 5*time.Second), c, s.Addr())
	require.NoError(t, err)
	assert.Equal(t, localAddr(t, c), mapped)

	// The read deadline Bind used is cleared.
	send(t, other, localAddr(t, c), []byte("later"))
	buf := make([]byte, 16)
	n, _, err := c.ReadFrom(buf)
	require.NoError(t, err)
	assert.Equal(t, "later", string(buf[:n]))
}

func TestBindNoResponse(t *testing.T) {
	// A socket that never answers stands for a server behind a firewall.
	silent := client(t)
	c := client(t)
	start := time.Now()
	_, err := stun.Bind(ctxT(t, 700*time.Millisecond), c, localAddr(t, silent))
	require.ErrorIs(t, err, stun.ErrNoResponse)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 3*time.Second, "Bind outlived its context")
}

func TestBindCancel(t *testing.T) {
	silent := client(t)
	c := client(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := stun.Bind(ctx, c, localAddr(t, silent))
	require.ErrorIs(t, err, stun.ErrNoResponse)
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), 400*time.Millisecond, "cancellation did not interrupt the read")
}

// TestDiscoverLoopback runs discovery where there is no NAT at all.
func TestDiscoverLoopback(t *testing.T) {
	s := rfc5780Server(t)
	res, err := stun.Discover(ctxT(t, 10*time.Second), netx.OS, s.Addr(), stun.Options{Wait: 200 * time.Millisecond, Tries: 2})
	require.NoError(t, err)
	assert.False(t, res.NATed, "%s: %v", res, res.Mapped)
	assert.Equal(t, stun.EndpointIndependent, res.Mapping, "%s", res)
	assert.Equal(t, stun.EndpointIndependent, res.Filtering, "%s", res)
	assert.Equal(t, s.OtherAddr(), res.Other)
	assert.Equal(t, "no NAT, endpoint-independent filtering", res.String())
	assert.Equal(t, uint64(1), s.Stats().Changed, "only filtering test II asks for a change")
}

func TestDiscoverErrors(t *testing.T) {
	plain := plainServer(t)
	silent := client(t)
	quick := stun.Options{Wait: 100 * time.Millisecond, Tries: 1}
	tests := []struct {
		name    string
		n       netx.Network
		server  netip.AddrPort
		opt     stun.Options
		wantIs  error
		wantErr string
	}{
		{name: "not rfc 5780", n: netx.OS, server: plain.Addr(), opt: quick, wantIs: stun.ErrNoOtherAddress},
		{name: "no answer", n: netx.OS, server: localAddr(t, silent), opt: quick, wantIs: stun.ErrNoResponse},
		{name: "nil network", server: plain.Addr(), wantErr: "stun: discover: nil Network"},
		{name: "no server", n: netx.OS, wantErr: "stun: discover: invalid server address invalid AddrPort"},
		{name: "port zero", n: netx.OS, server: netip.MustParseAddrPort("127.0.0.1:0"), wantErr: "stun: discover: invalid server address 127.0.0.1:0"},
		{name: "negative tries", n: netx.OS, server: plain.Addr(), opt: stun.Options{Tries: -1}, wantErr: "stun: discover: negative Wait 0s or Tries -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := stun.Discover(ctxT(t, 5*time.Second), tt.n, tt.server, tt.opt)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				return
			}
			require.ErrorIs(t, err, tt.wantIs)
		})
	}
}

func TestBehaviorString(t *testing.T) {
	for b, want := range map[stun.Behavior]string{
		stun.EndpointIndependent:     "endpoint-independent",
		stun.AddressDependent:        "address-dependent",
		stun.AddressAndPortDependent: "address-and-port-dependent",
		stun.Behavior(7):             "Behavior(7)",
	} {
		assert.Equal(t, want, b.String())
	}
}

func TestBindIPv6(t *testing.T) {
	lo6 := netip.MustParseAddrPort("[::1]:0")
	c, err := netx.OS.ListenPacket(context.Background(), "udp6", lo6.String())
	if err != nil {
		t.Skipf("needs IPv6 loopback: %v", err)
	}
	defer c.Close()
	s := startServer(t, stun.Config{Primary: lo6})
	mapped, err := stun.Bind(ctxT(t, 5*time.Second), c, s.Addr())
	require.NoError(t, err)
	assert.Equal(t, localAddr(t, c), mapped)
	assert.True(t, mapped.Addr().Is6())
}
