package control_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/labtest"
	"github.com/latticelab/lattice/lab/nat"
)

const token = "lab-join-token-0123456789"

// TestRegisterInLab runs control on a public lab host and registers nodes
// from behind different NATs, over NATS and over HTTP; they then signal
// each other through control.
func TestRegisterInLab(t *testing.T) {
	w := labtest.New(t, fabric.Config{Seed: 1})
	server := w.Server
	var hosts []*fabric.Host
	for _, profile := range []string{"port-restricted-cone", "symmetric", "udp-blocked"} {
		hosts = append(hosts, w.Site(t, profile, func(cfg *nat.Config) {
			// A corporate firewall lets the mesh's NATS and HTTP ports out.
			cfg.Firewall.Rules = append([]nat.Rule{{Action: nat.Allow, Proto: nat.TCP, Ports: []nat.PortRange{nat.Port(4222), nat.Port(8080)}}}, cfg.Firewall.Rules...)
		}).Host)
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

	var resps []*controlapi.RegisterResponse
	for i, h := range hosts {
		req := controlapi.Join{Token: token, Name: h.Name(), Key: key.NewPrivate()}
		var r *controlapi.RegisterResponse
		if i%2 == 0 {
			r, err = controlapi.RegisterNATS(ctx, h, "nats://203.0.113.100:4222?insecure=1", req) // the lab fabric: plaintext by consent
		} else {
			r, err = controlapi.RegisterHTTP(ctx, h, "http://203.0.113.100:8080?insecure=1", req)
		}
		require.NoError(t, err, "register %s", h.Name())
		assert.Len(t, r.Peers, i)
		resps = append(resps, r)
	}

	got := make(chan string, 1)
	last := resps[2]
	s2, err := controlapi.Connect(ctx, hosts[2], last.NodeID, last.NATS, controlapi.Handlers{Signal: func(from string, p []byte) { got <- from + ":" + string(p) }})
	require.NoError(t, err)
	defer s2.Close()
	s0, err := controlapi.Connect(ctx, hosts[0], resps[0].NodeID, resps[0].NATS, controlapi.Handlers{})
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

// TestSessionProbeAfterNATReboot: the NAT in front of a node reboots and
// forgets its NATS connection's mapping. Probe finds the silent
// connection within its timeout and reconnects at once; the session
// works again, and the node is told to resync.
func TestSessionProbeAfterNATReboot(t *testing.T) {
	w := labtest.New(t, fabric.Config{Seed: 1})
	site := w.Site(t, "port-restricted-cone")
	st, err := control.OpenFileStore(filepath.Join(t.TempDir(), "registry.json"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	srv, err := control.New(ctx, control.Config{
		Network: w.Server, Tokens: []control.JoinToken{{Value: token}}, Store: st,
		EmbeddedNATS: &control.EmbeddedNATSConfig{Network: w.Server, Listen: "203.0.113.100:443"},
	})
	require.NoError(t, err)
	defer srv.Close()
	k := key.NewPrivate()
	r, err := controlapi.RegisterNATS(ctx, site.Host, "nats://203.0.113.100:443?insecure=1", controlapi.Join{Token: token, Name: "n", Key: k})
	require.NoError(t, err)
	reconnected := make(chan struct{}, 1)
	s, err := controlapi.Connect(ctx, site.Host, r.NodeID, r.NATS, controlapi.Handlers{Reconnected: func() {
		select {
		case reconnected <- struct{}{}:
		default:
		}
	}})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Probe(ctx, time.Second), "a live session answers")

	site.Router.NAT().Reboot()
	start := time.Now()
	err = s.Probe(ctx, 500*time.Millisecond)
	require.Error(t, err)
	assert.ErrorContains(t, err, "control session: no answer within 500ms, reconnecting")
	select {
	case <-reconnected:
		t.Logf("reconnected %v after the reboot", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("no reconnect within 5 s of the failed probe")
	}
	_, err = s.Peers(ctx)
	require.NoError(t, err, "the session works again")
	require.NoError(t, s.Probe(ctx, time.Second))
}
