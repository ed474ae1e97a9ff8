package netx_test

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/pion/transport/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/netx/netxtest"
)

var loopback4 = netip.MustParseAddr("127.0.0.1")

func pionNet(t *testing.T, n netx.Network) transport.Net {
	t.Helper()
	pn, err := netx.PionNet(n)
	require.NoError(t, err)
	return pn
}

// TestOpaqueConformance runs the suite on OS hidden behind bare
// interfaces: the suite must not depend on *net.UDPConn and friends, or
// lab hosts could never pass it.
func TestOpaqueConformance(t *testing.T) {
	netxtest.Run(t, func(t *testing.T) netxtest.Env {
		n := &opaqueNetwork{}
		return netxtest.Env{Server: n, Client: n, ServerAddr: loopback4, ClientAddr: loopback4, Blackhole: blackhole(t, loopback4)}
	})
}

func TestPionNetNil(t *testing.T) {
	_, err := netx.PionNet(nil)
	assert.EqualError(t, err, "netx: pion net: nil network")
}

func TestPionInterfaces(t *testing.T) {
	n := &opaqueNetwork{ifs: []netx.Interface{
		{Index: 1, Name: "lo", MTU: 65536, Flags: net.FlagUp | net.FlagLoopback, Addrs: []netip.Prefix{
			netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128"),
		}},
		{Index: 7, Name: "eth0", MTU: 1500, Flags: net.FlagUp, HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 1}, Addrs: []netip.Prefix{
			netip.MustParsePrefix("10.1.2.3/24"), netip.MustParsePrefix("::ffff:192.0.2.9/120"),
		}},
	}}
	pn := pionNet(t, n)

	ifs, err := pn.Interfaces()
	require.NoError(t, err)
	require.Len(t, ifs, 2)

	eth, err := pn.InterfaceByName("eth0")
	require.NoError(t, err)
	assert.Equal(t, 7, eth.Index)
	assert.Equal(t, 1500, eth.MTU)
	assert.Equal(t, net.FlagUp, eth.Flags)
	assert.Equal(t, "02:00:00:00:00:01", eth.HardwareAddr.String())
	addrs, err := eth.Addrs()
	require.NoError(t, err)
	require.Len(t, addrs, 2)
	for i, want := range []string{"10.1.2.3/24", "192.0.2.9/24"} {
		ipn, ok := addrs[i].(*net.IPNet)
		require.True(t, ok, "address %d is %T, pion needs *net.IPNet", i, addrs[i])
		assert.Equal(t, want, ipn.String())
		assert.Len(t, ipn.IP, net.IPv4len, "IPv4 must be 4 bytes")
	}

	lo, err := pn.InterfaceByIndex(1)
	require.NoError(t, err)
	assert.Equal(t, "lo", lo.Name)

	tests := []struct {
		name string
		call func() error
	}{
		{name: "by name", call: func() error { _, err := pn.InterfaceByName("wlan0"); return err }},
		{name: "by index", call: func() error { _, err := pn.InterfaceByIndex(3); return err }},
	}
	for _, tt := range tests {
		t.Run("missing "+tt.name, func(t *testing.T) {
			assert.ErrorIs(t, tt.call(), transport.ErrInterfaceNotFound)
		})
	}
}

func TestPionResolve(t *testing.T) {
	plain := &opaqueNetwork{}
	named := resolvingNetwork{&opaqueNetwork{names: map[string][]netip.Addr{
		"stun.lab": {netip.MustParseAddr("2001:db8::5"), netip.MustParseAddr("198.51.100.5")},
		"v6.lab":   {netip.MustParseAddr("2001:db8::6")},
	}}}
	tests := []struct {
		name    string
		n       netx.Network
		network string
		address string
		want    string // String() of the result
		wantErr error  // matched with errors.Is when set
		wantMsg string // exact error text when set
	}{
		{name: "udp4 literal", n: plain, network: "udp4", address: "192.0.2.1:3478", want: "192.0.2.1:3478"},
		{name: "udp6 literal", n: plain, network: "udp6", address: "[2001:db8::1]:3478", want: "[2001:db8::1]:3478"},
		{name: "zone", n: plain, network: "udp", address: "[fe80::1%eth0]:9", want: "[fe80::1%eth0]:9"},
		{name: "empty host", n: plain, network: "udp", address: ":0", want: ":0"},
		{name: "mapped unmapped", n: plain, network: "udp4", address: "[::ffff:192.0.2.1]:1", want: "192.0.2.1:1"},
		{name: "udp4 rejects v6", n: plain, network: "udp4", address: "[2001:db8::1]:1", wantMsg: "address 2001:db8::1: no suitable address"},
		{name: "udp6 rejects v4", n: plain, network: "udp6", address: "192.0.2.1:1", wantMsg: "address 192.0.2.1: no suitable address"},
		{name: "name without resolver", n: plain, network: "udp", address: "stun.example.com:3478", wantErr: netx.ErrNoResolver},
		{name: "service port", n: plain, network: "udp", address: "192.0.2.1:stun", wantMsg: "address 192.0.2.1:stun: invalid port"},
		{name: "missing port", n: plain, network: "udp", address: "192.0.2.1", wantMsg: "address 192.0.2.1: missing port in address"},
		{name: "wrong network", n: plain, network: "tcp", address: "192.0.2.1:1", wantMsg: "unknown network tcp"},
		{name: "name prefers v4", n: named, network: "udp", address: "stun.lab:3478", want: "198.51.100.5:3478"},
		{name: "name v6", n: named, network: "udp6", address: "stun.lab:3478", want: "[2001:db8::5]:3478"},
		{name: "name v4 only missing", n: named, network: "udp4", address: "v6.lab:1", wantMsg: "address v6.lab: no suitable address"},
		{name: "unknown name", n: named, network: "udp", address: "nope.lab:1", wantMsg: `netx: resolve udp "nope.lab": lookup nope.lab: no such host`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pionNet(t, tt.n).ResolveUDPAddr(tt.network, tt.address)
			switch {
			case tt.wantErr != nil:
				assert.ErrorIs(t, err, tt.wantErr)
			case tt.wantMsg != "":
				assert.EqualError(t, err, tt.wantMsg)
			default:
				require.NoError(t, err)
				assert.Equal(t, tt.want, got.String())
				if ip4 := got.IP.To4(); ip4 != nil {
					assert.Len(t, got.IP, net.IPv4len, "IPv4 must be 4 bytes for gVisor")
				}
			}
		})
	}

	t.Run("tcp", func(t *testing.T) {
		got, err := pionNet(t, plain).ResolveTCPAddr("tcp4", "192.0.2.1:443")
		require.NoError(t, err)
		assert.Equal(t, "192.0.2.1:443", got.String())
		_, err = pionNet(t, plain).ResolveTCPAddr("udp", "192.0.2.1:443")
		assert.EqualError(t, err, "unknown network udp")
	})
	t.Run("ip", func(t *testing.T) {
		got, err := pionNet(t, plain).ResolveIPAddr("ip4:icmp", "192.0.2.1")
		require.NoError(t, err)
		assert.Equal(t, "192.0.2.1", got.String())
		got, err = pionNet(t, plain).ResolveIPAddr("ip6", "fe80::1%lo")
		require.NoError(t, err)
		assert.Equal(t, "fe80::1%lo", got.String())
		_, err = pionNet(t, plain).ResolveIPAddr("ip", "host.example")
		assert.ErrorIs(t, err, netx.ErrNoResolver)
	})
	t.Run("os resolves names", func(t *testing.T) {
		_, ok := netx.OS.(netx.Resolver)
		assert.True(t, ok, "OS must implement Resolver")
	})
}

// TestPionTCP covers the TCP half of the adapter on an opaque network,
// where the wrapper has to supply every TCP-specific method itself.
func TestPionTCP(t *testing.T) {
	for _, tt := range []struct {
		name string
		n    netx.Network
	}{
		{name: "os", n: netx.OS},
		{name: "opaque", n: &opaqueNetwork{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pn := pionNet(t, tt.n)
			ln, err := pn.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
			require.NoError(t, err)
			defer ln.Close()
			raddr, ok := ln.Addr().(*net.TCPAddr)
			require.True(t, ok, "listener address is %T", ln.Addr())

			accepted := make(chan transport.TCPConn, 1)
			go func() {
				c, _ := ln.AcceptTCP()
				accepted <- c
			}()
			c, err := pn.DialTCP("tcp4", nil, raddr)
			require.NoError(t, err)
			defer c.Close()
			sc := <-accepted
			require.NotNil(t, sc)
			defer sc.Close()

			for _, set := range []error{
				c.SetNoDelay(true), c.SetKeepAlive(true), c.SetKeepAlivePeriod(time.Second),
				c.SetLinger(-1), c.SetReadBuffer(1 << 16), c.SetWriteBuffer(1 << 16),
			} {
				assert.NoError(t, set, "tuning knobs succeed, as no-ops where unsupported")
			}
			n, err := c.ReadFrom(io.LimitReader(zeros{}, 4096))
			require.NoError(t, err)
			assert.EqualValues(t, 4096, n)
			got, err := io.ReadFull(sc, make([]byte, 4096))
			require.NoError(t, err)
			assert.Equal(t, 4096, got)

			err = c.CloseWrite()
			if tt.name == "opaque" {
				assert.ErrorIs(t, err, errors.ErrUnsupported)
				assert.ErrorIs(t, ln.SetDeadline(time.Now()), errors.ErrUnsupported)
				return
			}
			require.NoError(t, err)
			_, err = sc.Read(make([]byte, 1))
			assert.ErrorIs(t, err, io.EOF, "CloseWrite must reach the peer as EOF")
		})
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

func TestPionDialTCPLocalAddr(t *testing.T) {
	pn := pionNet(t, netx.OS)
	_, err := pn.DialTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4000}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1})
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = pn.CreateDialer(&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}).Dial("tcp", "127.0.0.1:1")
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}

func TestPionDialerTimeout(t *testing.T) {
	hole := blackhole(t, loopback4)
	if !hole.IsValid() {
		t.Skip("no loopback blackhole on this platform")
	}
	pn := pionNet(t, netx.OS)
	start := time.Now()
	_, err := pn.CreateDialer(&net.Dialer{Timeout: 100 * time.Millisecond}).Dial("tcp", hole.String())
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout(), "dial error %q is not a timeout", err)
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestPionListenConfig(t *testing.T) {
	n := &opaqueNetwork{}
	lc := pionNet(t, n).CreateListenConfig(&net.ListenConfig{})
	ctx := t.Context()
	pc, err := lc.ListenPacket(ctx, "udp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer pc.Close()
	_, ok := pc.(transport.UDPConn)
	assert.True(t, ok, "packet conns from the adapter are transport.UDPConn")
	assert.EqualValues(t, 1, n.packetConns.Load())

	ln, err := lc.Listen(ctx, "tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	assert.NoError(t, ln.Close())
}
