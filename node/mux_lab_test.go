package node_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/pion/ice/v4"
	pionstun "github.com/pion/stun/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/stun"
)

// TestMuxSharesSocket puts a node's mux behind a NAT: an ICE agent on the
// mux gathers a server-reflexive candidate that is the NAT's mapping of
// the very socket WireGuard uses, WireGuard datagrams reach the WireGuard
// side, and garbage is counted and dropped.
func TestMuxSharesSocket(t *testing.T) {
	f, err := fabric.New(fabric.Config{Seed: 1})
	require.NoError(t, err)
	defer f.Close()
	must := func(_ any, err error) { t.Helper(); require.NoError(t, err) }
	must(f.AddNetwork(fabric.NetworkConfig{Name: "internet", Prefix: netip.MustParsePrefix("203.0.113.0/24")}))
	must(f.AddNetwork(fabric.NetworkConfig{Name: "home", Prefix: netip.MustParsePrefix("192.168.1.0/24")}))
	cfg, err := nat.Profile("port-restricted-cone")
	require.NoError(t, err)
	must(f.AddRouter(fabric.RouterConfig{Name: "nat", Uplink: "wan", NAT: &cfg, Interfaces: []fabric.InterfaceConfig{
		{Name: "lan", Network: "home", Addr: netip.MustParseAddr("192.168.1.1")},
		{Name: "wan", Network: "internet", Addr: netip.MustParseAddr("203.0.113.10")},
	}}))
	server, err := f.AddHost(fabric.HostConfig{Name: "server", Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: netip.MustParseAddr("203.0.113.100")}}})
	require.NoError(t, err)
	h, err := f.AddHost(fabric.HostConfig{Name: "laptop", Gateway: netip.MustParseAddr("192.168.1.1"),
		Interfaces: []fabric.InterfaceConfig{{Network: "home", Addr: netip.MustParseAddr("192.168.1.2")}}})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := stun.NewServer(stun.Config{Network: server, Primary: netip.MustParseAddrPort("203.0.113.100:3478")})
	require.NoError(t, err)
	require.NoError(t, st.Start(ctx))
	defer st.Close()

	pc, err := h.ListenPacket(ctx, "udp4", ":51820")
	require.NoError(t, err)
	mux := node.NewMux(pc, nil)
	defer mux.Close()

	pn, err := netx.PionNet(h)
	require.NoError(t, err)
	umux := ice.NewUniversalUDPMuxDefault(ice.UniversalUDPMuxParams{UDPConn: mux.STUNConn(), Net: pn})
	defer umux.Close()
	stunURL, err := pionstun.ParseURI("stun:203.0.113.100:3478")
	require.NoError(t, err)
	agent, err := ice.NewAgentWithOptions(
		ice.WithNet(pn),
		ice.WithUDPMux(umux), ice.WithUDPMuxSrflx(umux),
		ice.WithUrls([]*pionstun.URI{stunURL}),
		ice.WithNetworkTypes([]ice.NetworkType{ice.NetworkTypeUDP4}),
		ice.WithCandidateTypes([]ice.CandidateType{ice.CandidateTypeHost, ice.CandidateTypeServerReflexive}),
		ice.WithMulticastDNSMode(ice.MulticastDNSModeDisabled),
	)
	require.NoError(t, err)
	defer agent.Close()
	cands := make(chan ice.Candidate, 8)
	require.NoError(t, agent.OnCandidate(func(c ice.Candidate) {
		if c != nil {
			cands <- c
		}
	}))
	require.NoError(t, agent.GatherCandidates())
	var srflx ice.Candidate
	for srflx == nil {
		select {
		case c := <-cands:
			if c.Type() == ice.CandidateTypeServerReflexive {
				srflx = c
			}
		case <-ctx.Done():
			t.Fatal("no server-reflexive candidate")
		}
	}
	assert.Equal(t, "203.0.113.10", srflx.Address())
	assert.Equal(t, 51820, srflx.Port(), "the NAT preserved the mux socket's port: the candidate is WireGuard's socket")

	// A peer on the internet sends WireGuard and garbage to that mapping.
	// The port-restricted NAT only admits it after the laptop sent to it.
	peer, err := server.ListenPacket(ctx, "udp4", "203.0.113.100:51820")
	require.NoError(t, err)
	defer peer.Close()
	require.NoError(t, mux.WriteTo([]byte("open the mapping"), netip.MustParseAddrPort("203.0.113.100:51820")))
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _, err = peer.ReadFrom(make([]byte, 64)) // the mapping is open once this arrived
	require.NoError(t, err)
	wgData := make([]byte, 48)
	wgData[0] = 4
	to := net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.10:51820"))
	_, err = peer.WriteTo([]byte("not wireguard"), to)
	require.NoError(t, err)
	_, err = peer.WriteTo(wgData, to)
	require.NoError(t, err)
	bufs := [][]byte{make([]byte, 2048), make([]byte, 2048)}
	sizes := make([]int, 2)
	from := make([]netip.AddrPort, 2)
	n, err := mux.ReadWireGuard(nil, bufs, sizes, from)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, wgData, bufs[0][:sizes[0]])
	assert.Equal(t, "203.0.113.100:51820", from[0].String())
	s := mux.Stats()
	assert.Equal(t, uint64(1), s.WireGuard)
	assert.Equal(t, uint64(1), s.Other)
	assert.Positive(t, s.STUN, "the STUN answers came through the mux")
}
