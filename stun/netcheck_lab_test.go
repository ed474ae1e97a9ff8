package stun_test

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/stun"
)

// TestNetcheckBehindLabNATProfiles: behind every named lab NAT profile,
// Netcheck reports the profile's mapping, filtering, port preservation
// and hairpinning, the NAT's public address, and UDP blocked where the
// firewall blocks it.
func TestNetcheckBehindLabNATProfiles(t *testing.T) {
	for _, name := range nat.ProfileNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, err := nat.Profile(name)
			require.NoError(t, err)
			w := newLab(t, &cfg)
			rep, err := stun.Netcheck(ctxT(t, 20*time.Second), w.client, []netip.AddrPort{labPrimary}, labOptions)
			require.NoError(t, err)
			require.Len(t, rep.Servers, 1)
			if name == "udp-blocked" {
				assert.False(t, rep.UDP)
				assert.Contains(t, rep.Servers[0].Err, stun.ErrNoResponse.Error())
				assert.Nil(t, rep.Mapping)
				return
			}
			require.True(t, rep.UDP, "%+v", rep)
			assert.True(t, rep.NATed)
			assert.Equal(t, labWAN, rep.Public.Addr())
			assert.Equal(t, rep.Public, rep.Servers[0].Mapped)
			assert.Positive(t, rep.Servers[0].RTT)
			require.NotNil(t, rep.Mapping, rep.BehaviorError)
			assert.Equal(t, cfg.Mapping.String(), rep.Mapping.String())
			assert.Equal(t, cfg.Filtering.String(), rep.Filtering.String())
			assert.Equal(t, labPrimary, rep.BehaviorServer)
			if cfg.PortAllocation == nat.Preserve {
				assert.True(t, rep.PortPreserved, "preserving NAT, public %v", rep.Public)
			}
			assert.Equal(t, cfg.Hairpin, rep.Hairpin, "hairpin")
			b, err := json.Marshal(rep)
			require.NoError(t, err)
			var back stun.Report
			require.NoError(t, json.Unmarshal(b, &back), "%s", b)
			assert.Equal(t, rep.Mapping, back.Mapping)
		})
	}
}

// TestNetcheckLabNoNAT: a routed LAN has no NAT, its own port, and the
// behaviour of no NAT.
func TestNetcheckLabNoNAT(t *testing.T) {
	w := newLab(t, nil)
	rep, err := stun.Netcheck(ctxT(t, 15*time.Second), w.client, []netip.AddrPort{labPrimary}, labOptions)
	require.NoError(t, err)
	assert.True(t, rep.UDP)
	assert.False(t, rep.NATed)
	assert.True(t, rep.PortPreserved)
	assert.Equal(t, netip.MustParseAddr("192.168.1.2"), rep.Public.Addr())
	require.NotNil(t, rep.Mapping)
	assert.Equal(t, stun.EndpointIndependent, *rep.Mapping)
}

func TestNetcheckBadInput(t *testing.T) {
	w := newLab(t, nil)
	for _, tc := range []struct {
		name    string
		servers []netip.AddrPort
		opt     stun.Options
		wantErr string
	}{
		{name: "none", wantErr: "stun: netcheck: no STUN servers"},
		{name: "zero port", servers: []netip.AddrPort{netip.MustParseAddrPort("203.0.113.100:0")}, wantErr: "stun: netcheck: invalid server address 203.0.113.100:0"},
		{name: "unspecified", servers: []netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:3478")}, wantErr: "invalid server address"},
		{name: "negative", servers: []netip.AddrPort{labPrimary}, opt: stun.Options{Tries: -1}, wantErr: "stun: netcheck: negative Wait 0s or Tries -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := stun.Netcheck(ctxT(t, 5*time.Second), w.client, tc.servers, tc.opt)
			assert.ErrorContains(t, err, tc.wantErr)
		})
	}
	_, err := stun.Netcheck(ctxT(t, 5*time.Second), nil, []netip.AddrPort{labPrimary}, stun.Options{})
	assert.ErrorContains(t, err, "nil Network")
}

// TestNetcheckTwoServers: asking two server endpoints from one socket
// shows a destination-dependent mapping by itself (MappingVaries), and
// an endpoint-independent one does not.
func TestNetcheckTwoServers(t *testing.T) {
	for _, tc := range []struct {
		profile string
		varies  bool
	}{
		{"port-restricted-cone", false},
		{"symmetric", true},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			t.Parallel()
			cfg, err := nat.Profile(tc.profile)
			require.NoError(t, err)
			w := newLab(t, &cfg)
			rep, err := stun.Netcheck(ctxT(t, 20*time.Second), w.client, []netip.AddrPort{labPrimary, labAlternate}, labOptions)
			require.NoError(t, err)
			require.Len(t, rep.Servers, 2)
			for _, sr := range rep.Servers {
				assert.Empty(t, sr.Err)
				assert.Equal(t, labWAN, sr.Mapped.Addr())
			}
			assert.Equal(t, tc.varies, rep.MappingVaries, "%+v", rep.Servers)
		})
	}
}
