package gvnet

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
)

// FuzzParseAddr feeds the address parser every Dial, Listen and
// ListenPacket goes through: no panic; an error is a *net.OpError naming
// the operation and network, and the network, address or host that was
// wrong; a result has the family the network and config ask for, the
// literal's address and port, and parses back from its own string to
// itself.
func FuzzParseAddr(f *testing.F) {
	f.Add("udp", "127.0.0.1:53", false, false)
	f.Add("tcp6", "[::1]:443", false, false)
	f.Add("tcp", ":0", false, true)
	f.Add("udp4", "localhost:9", false, false)
	f.Add("tcp", "[::ffff:10.0.0.1%eth0]:80", false, false)
	f.Add("udp6", "[fe80::1]:1", true, false)
	f.Add("tcp4", "[::1]:1", false, false)
	f.Add("tcp", "example.com:80", false, false)
	f.Add("tcp", "1.2.3.4:65536", false, false)
	f.Add("ip", "1.2.3.4", false, false)
	f.Fuzz(func(t *testing.T, network, address string, ipv4Only, preferV6 bool) {
		n := &Network{cfg: Config{IPv4Only: ipv4Only, PreferIPv6: preferV6}}
		ea, err := n.parseAddr("dial", network, address)
		if err != nil {
			var oe *net.OpError
			require.True(t, errors.As(err, &oe), "%T is not a *net.OpError: %v", err, err)
			require.Equal(t, "dial", oe.Op)
			require.Equal(t, network, oe.Net)
			require.NotNil(t, oe.Err)
			msg := err.Error()
			var une net.UnknownNetworkError
			if errors.As(err, &une) {
				require.Equal(t, network, string(une))
				return
			}
			host, _, _ := net.SplitHostPort(address)
			require.True(t, strings.Contains(msg, address) || strings.Contains(msg, strconv.Quote(host)),
				"error names neither the address %q nor the host: %v", address, err)
			return
		}

		host, portStr, err := net.SplitHostPort(address)
		require.NoError(t, err, "parsed %q", address)
		port, err := strconv.ParseUint(portStr, 10, 16)
		require.NoError(t, err)
		require.Equal(t, uint16(port), ea.full.Port)

		v6 := ea.proto == ipv6.ProtocolNumber
		require.True(t, v6 || ea.proto == ipv4.ProtocolNumber, "protocol %d", ea.proto)
		switch {
		case strings.HasSuffix(network, "4"):
			require.False(t, v6, "%s gave IPv6", network)
		case strings.HasSuffix(network, "6"):
			require.True(t, v6, "%s gave IPv4", network)
		}
		if ipv4Only {
			require.False(t, v6, "IPv4-only network gave IPv6 for %s %q", network, address)
		}
		got := ea.addrPort().Addr()
		require.Equal(t, v6, got.Is6())
		switch host {
		case "":
			require.True(t, got.IsUnspecified())
		case "localhost":
			require.True(t, got.IsLoopback())
		default:
			ip := netip.MustParseAddr(host).Unmap().WithZone("")
			if ip.IsUnspecified() {
				require.True(t, got.IsUnspecified())
			} else {
				require.Equal(t, ip, got)
			}
		}

		again, err := n.parseAddr("dial", network, ea.addrPort().String())
		require.NoError(t, err, "own string %s", ea.addrPort())
		require.Equal(t, ea, again)
	})
}
