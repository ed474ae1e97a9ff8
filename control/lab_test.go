package control_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
)

const token = "lab-join-token-0123456789"

// TestRegisterInLab runs control on a public lab host and registers nodes
// from behind different NATs, over NATS and over HTTP; they then signal
// each other through control.
func TestRegisterInLab(t *testing.T) {
	f, err := fabric.New(fabric.Config{Seed: 1})
	require.NoError(t, err)
	defer f.Close()
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "internet", Prefix: netip.MustParsePrefix("203.0.113.0/24")})
	require.NoError(t, err)
	server, err := f.AddHost(fabric.HostConfig{Name: "control", Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: netip.MustParseAddr("203.0.113.100")}}})
	require.NoError(t, err)
	var hosts []*fabric.Host
	for i, profile := range []string{"port-restricted-cone", "symmetric", "udp-blocked"} {
		lan := fmt.Sprintf("lan%d", i)
		_, err := f.AddNetwork(fabric.NetworkConfig{Name: lan, Prefix: netip.MustParsePrefix("192.168.1.0/24")})
		require.NoError(t, err)
		cfg, err := nat.Profile(profile)
		require.NoError(t, err)
		if profile == "udp-blocked" {
			// The corporate firewall allows NATS's port, as such a
			// network would for its mesh.
			cfg.Firewall.Rules = append([]nat.Rule{{Action: nat.Allow, Proto: nat.TCP, Ports: []nat.PortRange{nat.Port(4222), nat.Port(8080)}}}, cfg.Firewall.Rules...)
		}
		_, err = f.AddRouter(fabric.RouterConfig{Name: "nat" + lan, Uplink: "wan", NAT: &cfg, Interfaces: []fabric.InterfaceConfig{
			{Name: "lan", Network: lan, Addr: netip.MustParseAddr("192.168.1.1")},
			{Name: "wan", Network: "internet", Addr: netip.AddrFrom4([4]byte{203, 0, 113, byte(10 + i)})},
		}})
		require.NoError(t, err)
		h, err := f.AddHost(fabric.HostConfig{Name: "node" + lan, Gateway: netip.MustParseAddr("192.168.1.1"),
			Interfaces: []fabric.InterfaceConfig{{Network: lan, Addr: netip.MustParseAddr("192.168.1.2")}}})
		require.NoError(t, err)
		hosts = append(hosts, h)
	}

	st, err := control.OpenFileStore(filepath.Join(t.TempDir(), "registry.json"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	srv, err := control.New(ctx, control.Config{
		Network:      server,
		Tokens:       []control.JoinToken{{Value: token}},
		Store:        st,
		EmbeddedNATS: &control.EmbeddedNATSConfig{Network: server, Listen: "203.0.113.100:4222"},
		HTTPListen:   "203.0.113.100:8080",
	})
	require.NoError(t, err)
	defer srv.Close()
	assert.Equal(t, "nats://203.0.113.100:4222", srv.NATS().URL())

	var resps []*control.RegisterResponse
	for i, h := range hosts {
		var k control.Key
		_, _ = rand.Read(k[:])
		req := control.RegisterRequest{Token: token, Name: h.Name(), PublicKey: k}
		var r *control.RegisterResponse
		if i%2 == 0 {
			r, err = control.RegisterNATS(ctx, h, "nats://203.0.113.100:4222", req)
		} else {
			r, err = control.RegisterHTTP(ctx, h, "http://203.0.113.100:8080", req)
		}
		require.NoError(t, err, "register %s", h.Name())
		assert.Len(t, r.Peers, i)
		resps = append(resps, r)
	}

	got := make(chan string, 1)
	last := resps[2]
	s2, err := control.Connect(ctx, hosts[2], last.NodeID, last.NATS, control.Handlers{Signal: func(from string, p []byte) { got <- from + ":" + string(p) }})
	require.NoError(t, err)
	defer s2.Close()
	s0, err := control.Connect(ctx, hosts[0], resps[0].NodeID, resps[0].NATS, control.Handlers{})
	require.NoError(t, err)
	defer s0.Close()
	require.NoError(t, s0.Signal(ctx, last.NodeID, []byte("candidates")))
	select {
	case m := <-got:
		assert.Equal(t, resps[0].NodeID+":candidates", m)
	case <-ctx.Done():
		t.Fatal("signal did not cross the lab")
	}
}
