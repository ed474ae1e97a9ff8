package netx_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/transport/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
)

// TestICEOverPionNet connects two pion/ice agents through the adapter and
// sends a message each way. It runs on OS and on the opaque network,
// whose sockets are not *net.UDPConn, as on a lab host. Everything stays
// on 127.0.0.1: host candidates only, loopback only, no STUN/TURN, no
// mDNS.
func TestICEOverPionNet(t *testing.T) {
	for _, tt := range []struct {
		name string
		n    netx.Network
	}{
		{name: "os", n: netx.OS},
		{name: "opaque", n: &opaqueNetwork{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pn := pionNet(t, tt.n)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()

			controlling := newLoopbackAgent(t, pn)
			controlled := newLoopbackAgent(t, pn)
			signalCandidates(t, controlling, controlled)
			signalCandidates(t, controlled, controlling)

			ufragA, pwdA, err := controlling.GetLocalUserCredentials()
			require.NoError(t, err)
			ufragB, pwdB, err := controlled.GetLocalUserCredentials()
			require.NoError(t, err)
			require.NoError(t, controlling.GatherCandidates())
			require.NoError(t, controlled.GatherCandidates())

			type result struct {
				conn *ice.Conn
				err  error
			}
			accepted := make(chan result, 1)
			go func() {
				c, err := controlled.Accept(ctx, ufragA, pwdA)
				accepted <- result{c, err}
			}()
			connA, err := controlling.Dial(ctx, ufragB, pwdB)
			require.NoError(t, err, "controlling agent did not connect")
			resB := <-accepted
			require.NoError(t, resB.err, "controlled agent did not connect")
			connB := resB.conn

			pair, err := controlling.GetSelectedCandidatePair()
			require.NoError(t, err)
			require.NotNil(t, pair)
			assert.Equal(t, "127.0.0.1", pair.Local.Address())
			assert.Equal(t, "127.0.0.1", pair.Remote.Address())
			assert.Equal(t, ice.CandidateTypeHost, pair.Local.Type())

			deadline, _ := ctx.Deadline()
			for _, dir := range []struct {
				name     string
				from, to *ice.Conn
			}{
				{name: "controlling to controlled", from: connA, to: connB},
				{name: "controlled to controlling", from: connB, to: connA},
			} {
				msg := []byte("hello, " + dir.name)
				_, err := dir.from.Write(msg)
				require.NoError(t, err, dir.name)
				require.NoError(t, dir.to.SetReadDeadline(deadline))
				buf := make([]byte, 1500)
				n, err := dir.to.Read(buf)
				require.NoError(t, err, dir.name)
				assert.Equal(t, msg, buf[:n], dir.name)
			}

			if o, ok := tt.n.(*opaqueNetwork); ok {
				assert.Positive(t, o.packetConns.Load(), "ICE sockets did not come from the Network")
			}
		})
	}
}

// newLoopbackAgent creates an agent that gathers only UDP4 host candidates
// on loopback addresses of pn. The options that make loopback ICE work:
// WithIncludeLoopback (pion skips loopback interfaces and addresses by
// default), WithNetworkTypes UDP4, WithCandidateTypes host, and
// WithMulticastDNSMode disabled (the default, query-only, opens mDNS
// sockets on the multicast group); WithIPFilter keeps the agent off every
// other interface so no packet leaves the machine.
func newLoopbackAgent(t *testing.T, pn transport.Net) *ice.Agent {
	t.Helper()
	a, err := ice.NewAgentWithOptions(
		ice.WithNet(pn),
		ice.WithIncludeLoopback(),
		ice.WithNetworkTypes([]ice.NetworkType{ice.NetworkTypeUDP4}),
		ice.WithCandidateTypes([]ice.CandidateType{ice.CandidateTypeHost}),
		ice.WithIPFilter(func(ip net.IP) bool { return ip.IsLoopback() }),
		ice.WithMulticastDNSMode(ice.MulticastDNSModeDisabled),
	)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, a.GracefulClose()) })
	return a
}

// signalCandidates forwards from's candidates to to, serialised as they
// would be on the signalling channel.
func signalCandidates(t *testing.T, from, to *ice.Agent) {
	t.Helper()
	require.NoError(t, from.OnCandidate(func(c ice.Candidate) {
		if c == nil {
			return // gathering finished
		}
		remote, err := ice.UnmarshalCandidate(c.Marshal())
		if err != nil {
			t.Errorf("unmarshal candidate %q: %v", c.Marshal(), err)
			return
		}
		if err := to.AddRemoteCandidate(remote); err != nil {
			t.Errorf("add remote candidate: %v", err)
		}
	}))
}
