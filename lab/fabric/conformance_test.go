package fabric

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx/netxtest"
)

// TestHostConformance runs the netx conformance suite on lab hosts: one
// host talking to itself, and two hosts on one segment.
func TestHostConformance(t *testing.T) {
	t.Run("two-hosts", func(t *testing.T) {
		netxtest.Run(t, func(t *testing.T) netxtest.Env {
			w := newWorld(t, Config{})
			c, err := w.f.AddHost(HostConfig{Name: "client", Interfaces: []InterfaceConfig{{Network: "internet", Addr: ip("203.0.113.7")}}})
			require.NoError(t, err)
			return netxtest.Env{
				Server: w.server, Client: c,
				ServerAddr: serverIP, ClientAddr: ip("203.0.113.7"),
				// Nobody owns .200: SYNs to it go unanswered.
				Blackhole: netip.MustParseAddrPort("203.0.113.200:80"),
			}
		})
	})
	t.Run("one-host", func(t *testing.T) {
		netxtest.Run(t, func(t *testing.T) netxtest.Env {
			w := newWorld(t, Config{})
			return netxtest.Env{Server: w.server, Client: w.server, ServerAddr: serverIP, ClientAddr: serverIP}
		})
	})
}
