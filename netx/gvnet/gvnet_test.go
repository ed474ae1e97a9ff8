package gvnet_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/loopback"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/netx/gvnet"
	"github.com/latticelab/lattice/netx/netxtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// loNet is a Network on a bare stack with only a loopback NIC
// (127.0.0.1/8, ::1), listing that one interface.
type loNet struct{ *gvnet.Network }

func (loNet) Interfaces() ([]netx.Interface, error) {
	return []netx.Interface{{Index: 1, Name: "lo", MTU: 65536, Flags: net.FlagUp | net.FlagLoopback,
		Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128")}}}, nil
}

var _ netx.Network = loNet{}

// newNet builds a loopback-only stack and a Network on it with cfg
// (Stack filled in), both closed at cleanup.
func newNet(t *testing.T, cfg gvnet.Config) loNet {
	t.Helper()
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
		HandleLocal:        true,
	})
	t.Cleanup(func() { s.Close(); s.Wait() })
	require.Nil(t, s.CreateNIC(1, loopback.New()))
	for _, p := range []struct {
		proto tcpip.NetworkProtocolNumber
		addr  netip.Prefix
	}{{ipv4.ProtocolNumber, netip.MustParsePrefix("127.0.0.1/8")}, {ipv6.ProtocolNumber, netip.MustParsePrefix("::1/128")}} {
		require.Nil(t, s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: p.proto,
			AddressWithPrefix: tcpip.AddressWithPrefix{Address: gvnet.ToTCPIP(p.addr.Addr()), PrefixLen: p.addr.Bits()}}, stack.AddressProperties{}))
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: subnet(t, "127.0.0.0/8"), NIC: 1},
		{Destination: subnet(t, "::1/128"), NIC: 1},
	})
	cfg.Stack = s
	n, err := gvnet.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	return loNet{n}
}

func subnet(t *testing.T, p string) tcpip.Subnet {
	t.Helper()
	pr := netip.MustParsePrefix(p)
	sn, err := tcpip.NewSubnet(gvnet.ToTCPIP(pr.Addr()), tcpip.MaskFromBytes(net.CIDRMask(pr.Bits(), pr.Addr().BitLen())))
	require.NoError(t, err)
	return sn
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestConformance runs the netx suite on a bare stack: one Network
// talking to itself over loopback, UDP through gVisor.
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr netip.Addr
	}{{"ipv4", netip.MustParseAddr("127.0.0.1")}, {"ipv6", netip.IPv6Loopback()}} {
		t.Run(tc.name, func(t *testing.T) {
			netxtest.Run(t, func(t *testing.T) netxtest.Env {
				n := newNet(t, gvnet.Config{PreferIPv6: tc.addr.Is6()})
				return netxtest.Env{Server: n, Client: n, ServerAddr: tc.addr, ClientAddr: tc.addr}
			})
		})
	}
}

func TestNewRequiresStack(t *testing.T) {
	_, err := gvnet.New(gvnet.Config{})
	assert.EqualError(t, err, "gvnet: Config.Stack is required")
}

// TestListenErrors: every malformed or refused address is a *net.OpError
// saying what was wrong, prefixed with Config.Name.
func TestListenErrors(t *testing.T) {
	tests := []struct {
		name             string
		cfg              gvnet.Config
		network, address string
		wantErr          string
		wantIs           error
	}{
		{name: "bad network", network: "sctp", address: ":0", wantErr: "listen sctp: unknown network sctp"},
		{name: "udp on Listen", network: "udp", address: ":0", wantErr: "listen udp: unknown network udp"},
		{name: "no port", network: "tcp", address: "127.0.0.1", wantErr: "listen tcp: address 127.0.0.1: missing port in address"},
		{name: "bad port", network: "tcp", address: "127.0.0.1:http", wantErr: "listen tcp: address 127.0.0.1:http: invalid port"},
		{name: "host name", network: "tcp", address: "example.com:80", wantErr: `listen tcp: "example.com": ` + netx.ErrNoResolver.Error(), wantIs: netx.ErrNoResolver},
		{name: "family mismatch", network: "tcp6", address: "127.0.0.1:0", wantErr: "listen tcp6: address 127.0.0.1:0: address family mismatch"},
		{name: "loopback is fine", network: "tcp", address: "127.0.0.1:0"},
		{name: "foreign address", network: "tcp", address: "192.0.2.1:0", wantErr: "listen tcp 192.0.2.1:0: bad local address"},
		{name: "ipv4 only network", cfg: gvnet.Config{IPv4Only: true}, network: "tcp6", address: ":0", wantErr: "listen tcp6: unknown network tcp6"},
		{name: "ipv4 only literal", cfg: gvnet.Config{IPv4Only: true}, network: "tcp", address: "[::1]:0", wantErr: "listen tcp: address [::1]:0: this network speaks IPv4 only"},
		{name: "named", cfg: gvnet.Config{Name: "h1"}, network: "tcp", address: "192.0.2.1:0", wantErr: "h1: listen tcp 192.0.2.1:0: bad local address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNet(t, tt.cfg)
			ln, err := n.Listen(ctxT(t), tt.network, tt.address)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.NoError(t, ln.Close())
				return
			}
			require.Error(t, err)
			assert.EqualError(t, err, tt.wantErr)
			var oe *net.OpError
			assert.ErrorAs(t, err, &oe)
			if tt.wantIs != nil {
				assert.ErrorIs(t, err, tt.wantIs)
			}
		})
	}
}

// TestListenerAddr: a wildcard listener names its family's unspecified
// address, as package net's does.
func TestListenerAddr(t *testing.T) {
	tests := []struct {
		name             string
		cfg              gvnet.Config
		network, address string
		want             string
	}{
		{name: "any", network: "tcp", address: ":0", want: "0.0.0.0"},
		{name: "any v6 by network", network: "tcp6", address: ":0", want: "::"},
		{name: "any v6 preferred", cfg: gvnet.Config{PreferIPv6: true}, network: "tcp", address: ":0", want: "::"},
		{name: "localhost", network: "tcp", address: "localhost:0", want: "127.0.0.1"},
		{name: "localhost v6", cfg: gvnet.Config{PreferIPv6: true}, network: "tcp", address: "localhost:0", want: "::1"},
		{name: "mapped", network: "tcp", address: "[::ffff:127.0.0.1]:0", want: "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNet(t, tt.cfg)
			ln, err := n.Listen(ctxT(t), tt.network, tt.address)
			require.NoError(t, err)
			defer ln.Close()
			ap, err := netip.ParseAddrPort(ln.Addr().String())
			require.NoError(t, err)
			assert.Equal(t, tt.want, ap.Addr().String())
			assert.NotZero(t, ap.Port())
		})
	}
}

// TestDialErrno: a refused dial keeps its cause as the errno package net
// reports, inside a *net.OpError naming the destination.
func TestDialErrno(t *testing.T) {
	n := newNet(t, gvnet.Config{Name: "h1"})
	ln, err := n.Listen(ctxT(t), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	_, err = n.Dial(ctxT(t), "tcp", addr)
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, addr, oe.Addr.String())
	assert.EqualError(t, err, "h1: dial tcp "+addr+": connection refused")

	_, err = n.Dial(ctxT(t), "tcp", ":80")
	assert.EqualError(t, err, "h1: dial tcp: address :80: no destination address")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = n.Dial(ctx, "tcp", addr)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorAs(t, err, &oe)
}

func TestErrno(t *testing.T) {
	tests := []struct {
		in   tcpip.Error
		want error
	}{
		{&tcpip.ErrConnectionRefused{}, syscall.ECONNREFUSED},
		{&tcpip.ErrHostUnreachable{}, syscall.EHOSTUNREACH},
		{&tcpip.ErrHostDown{}, syscall.EHOSTDOWN},
		{&tcpip.ErrNetworkUnreachable{}, syscall.ENETUNREACH},
		{&tcpip.ErrTimeout{}, syscall.ETIMEDOUT},
		{&tcpip.ErrConnectionReset{}, syscall.ECONNRESET},
		{&tcpip.ErrConnectionAborted{}, syscall.ECONNABORTED},
		{&tcpip.ErrPortInUse{}, syscall.EADDRINUSE},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, gvnet.Errno(tt.in), "%T", tt.in)
	}
	assert.EqualError(t, gvnet.Errno(&tcpip.ErrBadLocalAddress{}), "bad local address")
}

// TestClose: after Close every operation fails with Config.ErrClosed.
func TestClose(t *testing.T) {
	errGone := errors.New("gone")
	n := newNet(t, gvnet.Config{ErrClosed: errGone})
	require.NoError(t, n.Close())
	require.NoError(t, n.Close(), "second Close")
	ctx := ctxT(t)
	_, err := n.Dial(ctx, "tcp", "127.0.0.1:80")
	assert.ErrorIs(t, err, errGone)
	var oe *net.OpError
	assert.ErrorAs(t, err, &oe)
	_, err = n.Listen(ctx, "tcp", ":0")
	assert.ErrorIs(t, err, errGone)
	_, err = n.ListenPacket(ctx, "udp", ":0")
	assert.ErrorIs(t, err, errGone)
	_, err = n.DialTCP(ctx, netip.MustParseAddrPort("127.0.0.1:4000"), netip.MustParseAddrPort("127.0.0.1:80"))
	assert.ErrorIs(t, err, errGone)
	_, err = n.Ping(ctx, netip.MustParseAddr("127.0.0.1"))
	assert.ErrorIs(t, err, errGone)

	n = newNet(t, gvnet.Config{})
	require.NoError(t, n.Close())
	_, err = n.Listen(ctx, "tcp", ":0")
	assert.ErrorIs(t, err, net.ErrClosed, "the default")
}

// TestDialTCPFromPort: DialTCP leaves from the chosen port.
func TestDialTCPFromPort(t *testing.T) {
	n := newNet(t, gvnet.Config{})
	ctx := ctxT(t)
	ln, err := n.Listen(ctx, "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	local := netip.MustParseAddrPort("127.0.0.1:40001")
	c, err := n.DialTCP(ctx, local, netip.MustParseAddrPort(ln.Addr().String()))
	require.NoError(t, err)
	defer c.Close()
	s, err := ln.Accept()
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, local.String(), s.RemoteAddr().String())

	_, err = n.DialTCP(ctx, netip.MustParseAddrPort("[::1]:40002"), netip.MustParseAddrPort(ln.Addr().String()))
	assert.ErrorContains(t, err, "address family mismatch")
}

// TestEgress: the hook refuses a Dial, and a ListenPacket socket's first
// datagram to a destination, with a *net.OpError wrapping its error.
func TestEgress(t *testing.T) {
	errDenied := errors.New("denied")
	var asked []string
	n := newNet(t, gvnet.Config{Egress: func(network string, dst netip.AddrPort) error {
		asked = append(asked, network+" "+dst.String())
		if dst.Port() == 9 {
			return errDenied
		}
		return nil
	}})
	ctx := ctxT(t)
	var oe *net.OpError
	_, err := n.Dial(ctx, "tcp", "127.0.0.1:9")
	assert.ErrorIs(t, err, errDenied)
	assert.ErrorAs(t, err, &oe)
	_, err = n.Dial(ctx, "udp", "127.0.0.1:9")
	assert.ErrorIs(t, err, errDenied)

	pc, err := n.ListenPacket(ctx, "udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:9")))
	assert.ErrorIs(t, err, errDenied)
	ok := net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:10"))
	for range 3 {
		_, err = pc.WriteTo([]byte("x"), ok)
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"tcp 127.0.0.1:9", "udp 127.0.0.1:9", "udp 127.0.0.1:9", "udp 127.0.0.1:10"}, asked,
		"asked once per new destination")
}

// recordingBinder is a UDPBinder that records its calls and refuses them.
type recordingBinder struct{ calls []string }

var errRecorded = errors.New("recorded")

func (b *recordingBinder) BindUDP(op, network string, local, remote netip.AddrPort) (gvnet.UDPConn, error) {
	b.calls = append(b.calls, op+" "+network+" "+local.String()+" "+remote.String())
	return nil, &net.OpError{Op: op, Net: network, Err: errRecorded}
}

// TestUDPBinder: with Config.UDP, datagram sockets come from it.
func TestUDPBinder(t *testing.T) {
	b := &recordingBinder{}
	n := newNet(t, gvnet.Config{UDP: b, Name: "h1"})
	ctx := ctxT(t)
	_, err := n.Dial(ctx, "udp4", "192.0.2.1:53")
	assert.EqualError(t, err, "h1: dial udp4: recorded")
	_, err = n.ListenPacket(ctx, "udp", ":5000")
	assert.ErrorIs(t, err, errRecorded)
	assert.Equal(t, []string{
		"dial udp4 0.0.0.0:0 192.0.2.1:53",
		"listen udp 0.0.0.0:5000 invalid AddrPort",
	}, b.calls)
}

func TestPing(t *testing.T) {
	n := newNet(t, gvnet.Config{})
	rtt, err := n.Ping(ctxT(t), netip.MustParseAddr("127.0.0.1"))
	require.NoError(t, err)
	assert.Positive(t, rtt)
	_, err = n.Ping(ctxT(t), netip.IPv6Loopback())
	assert.ErrorContains(t, err, "not an IPv4 address")
}
