package stun_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/stun"
)

// The lab topology: an "internet" segment with the STUN server on two
// addresses, and one LAN behind a router whose uplink may NAT.
var (
	labInternet  = netip.MustParsePrefix("203.0.113.0/24")
	labLAN       = netip.MustParsePrefix("192.168.1.0/24")
	labPrimary   = netip.MustParseAddrPort("203.0.113.100:3478")
	labAlternate = netip.MustParseAddrPort("203.0.113.101:3479")
	labWAN       = netip.MustParseAddr("203.0.113.10")
	labGateway   = netip.MustParseAddr("192.168.1.1")
)

// labOptions keep discovery quick: a filtered test costs 2 × 200ms.
var labOptions = stun.Options{Wait: 200 * time.Millisecond, Tries: 2}

type labWorld struct {
	server *stun.Server
	client *fabric.Host
}

// newLab builds the topology with natCfg on the router's uplink (nil: plain
// routing) and starts an RFC 5780 STUN server on the server host.
func newLab(t *testing.T, natCfg *nat.Config) labWorld {
	t.Helper()
	f, err := fabric.New(fabric.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	for _, n := range []fabric.NetworkConfig{{Name: "internet", Prefix: labInternet}, {Name: "lan", Prefix: labLAN}} {
		_, err := f.AddNetwork(n)
		require.NoError(t, err)
	}
	serverHost, err := f.AddHost(fabric.HostConfig{
		Name: "stun",
		Interfaces: []fabric.InterfaceConfig{
			{Network: "internet", Addr: labPrimary.Addr(), Aliases: []netip.Addr{labAlternate.Addr()}},
		},
		// Without NAT the LAN's own addresses reach the server, which
		// then needs a way back to them.
		Routes: []fabric.Route{{Dst: labLAN, Via: labWAN}},
	})
	require.NoError(t, err)
	_, err = f.AddRouter(fabric.RouterConfig{
		Name: "router",
		Interfaces: []fabric.InterfaceConfig{
			{Name: "lan", Network: "lan", Addr: labGateway},
			{Name: "wan", Network: "internet", Addr: labWAN},
		},
		Uplink: "wan",
		NAT:    natCfg,
	})
	require.NoError(t, err)
	clientHost, err := f.AddHost(fabric.HostConfig{
		Name:       "client",
		Interfaces: []fabric.InterfaceConfig{{Network: "lan", Addr: netip.MustParseAddr("192.168.1.2")}},
		Gateway:    labGateway,
	})
	require.NoError(t, err)
	s := startServer(t, stun.Config{Network: serverHost, Primary: labPrimary, Alternate: labAlternate})
	return labWorld{server: s, client: clientHost}
}

func (w labWorld) discover(t *testing.T) (stun.Result, error) {
	t.Helper()
	return stun.Discover(ctxT(t, 15*time.Second), w.client, labPrimary, labOptions)
}

// checkServerStats: the server saw only well-formed requests and answered
// every one.
func checkServerStats(t *testing.T, s *stun.Server) {
	t.Helper()
	st := s.Stats()
	assert.Positive(t, st.Requests)
	assert.Equal(t, st.Requests, st.Responses, "%+v", st)
	assert.Zero(t, st.Dropped.Total(), "%+v", st.Dropped)
	assert.Zero(t, st.SendErrors, "%+v", st)
}

// TestDiscoverBehindLabNAT: RFC 5780 discovery against the STUN server
// behind every combination of mapping and filtering behaviour classifies
// the NAT as configured. Port allocation varies across the combinations.
func TestDiscoverBehindLabNAT(t *testing.T) {
	behaviors := []nat.Behavior{nat.EndpointIndependent, nat.AddressDependent, nat.AddressAndPortDependent}
	allocs := []nat.PortAllocation{nat.Preserve, nat.Sequential, nat.Random}
	for i, m := range behaviors {
		for j, f := range behaviors {
			alloc := allocs[(i+j)%len(allocs)]
			t.Run(fmt.Sprintf("%s-mapping/%s-filtering", m, f), func(t *testing.T) {
				t.Parallel()
				w := newLab(t, &nat.Config{Mapping: m, Filtering: f, PortAllocation: alloc, Seed: 7})
				res, err := w.discover(t)
				require.NoError(t, err)
				assert.True(t, res.NATed, "discovery did not notice the NAT: %v", res.Mapped)
				assert.Equal(t, labWAN, res.Mapped[0].Addr(), "mapped address is the NAT's public one")
				assert.Equal(t, m.String(), res.Mapping.String(), "mapping (%s, %s allocation): %v", res, alloc, res.Mapped)
				assert.Equal(t, f.String(), res.Filtering.String(), "filtering (%s)", res)
				assert.Equal(t, labAlternate, res.Other)
				checkServerStats(t, w.server)
			})
		}
	}
}

// TestDiscoverBehindLabNATProfiles: discovery behind each named NAT
// profile classifies it as the profile says; UDP-blocking firewalls give
// a clear "no response".
func TestDiscoverBehindLabNATProfiles(t *testing.T) {
	for _, name := range nat.ProfileNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, err := nat.Profile(name)
			require.NoError(t, err)
			w := newLab(t, &cfg)
			res, err := w.discover(t)
			if name == "udp-blocked" {
				require.ErrorIs(t, err, stun.ErrNoResponse, "UDP must not get through a UDP-blocking firewall")
				assert.ErrorContains(t, err, "mapping test I")
				assert.Zero(t, w.server.Stats().Datagrams, "the firewall let a datagram through")
				return
			}
			require.NoError(t, err)
			assert.True(t, res.NATed)
			assert.Equal(t, cfg.Mapping.String(), res.Mapping.String(), "mapping: %s", res)
			assert.Equal(t, cfg.Filtering.String(), res.Filtering.String(), "filtering: %s", res)
			checkServerStats(t, w.server)
		})
	}
}

// TestDiscoverLabNoNAT: a routed LAN without NAT is no NAT at all.
func TestDiscoverLabNoNAT(t *testing.T) {
	w := newLab(t, nil)
	res, err := w.discover(t)
	require.NoError(t, err)
	assert.False(t, res.NATed, "%s: %v", res, res.Mapped)
	assert.Equal(t, netip.MustParseAddr("192.168.1.2"), res.Mapped[0].Addr())
	assert.Equal(t, stun.EndpointIndependent, res.Mapping)
	assert.Equal(t, stun.EndpointIndependent, res.Filtering)
}

// TestBindBehindLabNAT: a node learns its public endpoint on its own
// socket, and with a preserving NAT the port is its own.
func TestBindBehindLabNAT(t *testing.T) {
	cfg, err := nat.Profile("port-restricted-cone")
	require.NoError(t, err)
	w := newLab(t, &cfg)
	c, err := w.client.ListenPacket(ctxT(t, 5*time.Second), "udp4", ":51820")
	require.NoError(t, err)
	defer c.Close()
	mapped, err := stun.Bind(ctxT(t, 5*time.Second), c, labPrimary)
	require.NoError(t, err)
	assert.Equal(t, netip.AddrPortFrom(labWAN, 51820), mapped)
}
