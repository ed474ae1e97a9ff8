package node

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

func TestRelayOrder(t *testing.T) {
	relays := []controlapi.Relay{{Addr: "203.0.113.100:443"}, {Addr: "[2001:db8::64]:443"}, {Addr: "198.51.100.7:443"}}
	nat64 := netip.MustParsePrefix("64:ff9b::/96")
	for _, tc := range []struct {
		name  string
		f     families
		nat64 netip.Prefix
		want  []string
	}{
		{"dual-stack: control's order", families{true, true}, nat64, []string{"203.0.113.100:443", "[2001:db8::64]:443", "198.51.100.7:443"}},
		{"IPv4 only", families{v4: true}, netip.Prefix{}, []string{"203.0.113.100:443", "198.51.100.7:443"}},
		{"IPv6 only", families{v6: true}, netip.Prefix{}, []string{"[2001:db8::64]:443"}},
		{"IPv6 only behind NAT64", families{v6: true}, nat64, []string{"[2001:db8::64]:443", "[64:ff9b::cb00:7164]:443", "[64:ff9b::c633:6407]:443"}},
		{"nothing", families{}, nat64, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range relayOrder(relays, tc.f, tc.nat64) {
				got = append(got, r.Addr)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestRelayOrderLoopback: a relay on loopback is tried from any host,
// even one whose only addresses are loopback ones (hostFamilies counts
// none): a whole mesh on one machine (TestDualStackSocketUnmapsIPv4) has
// no other.
func TestRelayOrderLoopback(t *testing.T) {
	relays := []controlapi.Relay{{Addr: "127.0.0.1:4443"}, {Addr: "[::1]:4443"}, {Addr: "203.0.113.100:443"}}
	var got []string
	for _, r := range relayOrder(relays, families{}, netip.Prefix{}) {
		got = append(got, r.Addr)
	}
	assert.Equal(t, []string{"127.0.0.1:4443", "[::1]:4443"}, got)
}

// ifaceNet is a Network with only interfaces.
type ifaceNet struct {
	netx.Network
	addrs []string
}

func (n ifaceNet) Interfaces() ([]netx.Interface, error) {
	ifc := netx.Interface{Index: 1, Name: "eth0", Flags: net.FlagUp}
	for _, a := range n.addrs {
		ifc.Addrs = append(ifc.Addrs, netip.MustParsePrefix(a))
	}
	return []netx.Interface{ifc}, nil
}

func TestHostFamilies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addrs []string
		want  families
	}{
		{"loopback and link-local do not count", []string{"127.0.0.1/8", "::1/128", "fe80::1/64", "169.254.1.1/16"}, families{}},
		{"IPv6 only", []string{"fe80::1/64", "2001:db8:2::2/64"}, families{v6: true}},
		{"dual-stack", []string{"192.168.1.2/24", "2001:db8:1::2/64"}, families{true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, hostFamilies(ifaceNet{addrs: tc.addrs}))
		})
	}
}

// TestDialRelayFallsBack: a relay address that fails is not fatal while
// another answers; one the host has no family for is never dialed.
func TestDialRelayFallsBack(t *testing.T) {
	var dialed []string
	dial := func(_ context.Context, r controlapi.Relay, _ RelayAuth, _ func(key.Public, []byte)) (RelayClient, error) {
		dialed = append(dialed, r.Addr)
		if r.Addr == "[64:ff9b::cb00:7164]:443" {
			return &probeCounter{}, nil
		}
		return nil, errors.New("connection refused")
	}
	id := newIdentity("n", key.NewPrivate())
	n := &Node{cfg: Config{Relay: dial, Network: ifaceNet{addrs: []string{"2001:db8:2::2/64"}}, NAT64: netip.MustParsePrefix("64:ff9b::/96")},
		log: slog.New(slog.DiscardHandler), id: id, bind: NewBind(nil)}
	resp := &controlapi.RegisterResponse{Relays: []controlapi.Relay{{Addr: "203.0.113.100:443"}, {Addr: "[2001:db8::64]:443"}, {Addr: "[2001:db8::65]:443"}}}
	require.NoError(t, n.dialRelay(context.Background(), resp))
	assert.Equal(t, []string{"[2001:db8::64]:443", "[2001:db8::65]:443", "[64:ff9b::cb00:7164]:443"}, dialed, "native IPv6 first, then through the NAT64")
	assert.NotNil(t, n.relay)

	n.cfg.NAT64, dialed = netip.Prefix{}, nil
	resp.Relays = resp.Relays[:1]
	assert.EqualError(t, n.dialRelay(context.Background(), resp), "node: no relay address of a family this host has (relays: [{203.0.113.100:443 }])")
	assert.Empty(t, dialed)

	n.cfg.Network = ifaceNet{addrs: []string{"192.168.1.2/24"}}
	assert.EqualError(t, n.dialRelay(context.Background(), resp), "node: relay 203.0.113.100:443: connection refused")
}
