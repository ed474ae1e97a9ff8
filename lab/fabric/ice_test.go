package fabric

import (
	"context"
	"testing"
	"time"

	"github.com/pion/ice/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
)

// TestICEOnLabHosts runs two pion/ice agents on lab hosts through
// netx.PionNet: they gather host candidates from the hosts' interfaces and
// connect over the emulated network.
func TestICEOnLabHosts(t *testing.T) {
	w := newWorld(t, Config{})
	peer, err := w.f.AddHost(HostConfig{Name: "peer", Interfaces: []InterfaceConfig{{Network: "internet", Addr: ip("203.0.113.7")}}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	agent := func(h *Host) *ice.Agent {
		pn, err := netx.PionNet(h)
		require.NoError(t, err)
		a, err := ice.NewAgentWithOptions(
			ice.WithNet(pn),
			ice.WithNetworkTypes([]ice.NetworkType{ice.NetworkTypeUDP4}),
			ice.WithCandidateTypes([]ice.CandidateType{ice.CandidateTypeHost}),
			ice.WithMulticastDNSMode(ice.MulticastDNSModeDisabled),
		)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, a.GracefulClose()) })
		return a
	}
	a, b := agent(w.server), agent(peer)
	for _, p := range [][2]*ice.Agent{{a, b}, {b, a}} {
		from, to := p[0], p[1]
		require.NoError(t, from.OnCandidate(func(c ice.Candidate) {
			if c == nil {
				return
			}
			rc, err := ice.UnmarshalCandidate(c.Marshal())
			if err == nil {
				err = to.AddRemoteCandidate(rc)
			}
			if err != nil {
				t.Errorf("signal candidate: %v", err)
			}
		}))
	}
	ua, pa, err := a.GetLocalUserCredentials()
	require.NoError(t, err)
	ub, pb, err := b.GetLocalUserCredentials()
	require.NoError(t, err)
	require.NoError(t, a.GatherCandidates())
	require.NoError(t, b.GatherCandidates())
	accepted := make(chan *ice.Conn, 1)
	go func() {
		c, err := b.Accept(ctx, ua, pa)
		if err != nil {
			t.Errorf("accept: %v", err)
		}
		accepted <- c
	}()
	ca, err := a.Dial(ctx, ub, pb)
	require.NoError(t, err)
	cb := <-accepted
	require.NotNil(t, cb)
	pair, err := a.GetSelectedCandidatePair()
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.100", pair.Local.Address())
	assert.Equal(t, "203.0.113.7", pair.Remote.Address())

	_, err = ca.Write([]byte("over the lab"))
	require.NoError(t, err)
	buf := make([]byte, 64)
	require.NoError(t, cb.SetReadDeadline(time.Now().Add(2*time.Second)))
	n, err := cb.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "over the lab", string(buf[:n]))
}
