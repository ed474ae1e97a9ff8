package fabric

import (
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
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

// TestHostDialErrors: a lab host's dial failures keep their cause as the
// errno package net reports and name the host, as the pod netstack's do.
func TestHostDialErrors(t *testing.T) {
	w := newWorld(t, Config{})
	c, err := w.f.AddHost(HostConfig{Name: "client", Interfaces: []InterfaceConfig{{Network: "internet", Addr: ip("203.0.113.7")}}})
	require.NoError(t, err)
	tests := []struct {
		name             string
		network, address string
		wantIs           error
		wantErr          string
	}{
		{name: "closed port", network: "tcp", address: "203.0.113.100:81", wantIs: syscall.ECONNREFUSED,
			wantErr: "client: dial tcp 203.0.113.100:81: connection refused"},
		{name: "no route", network: "tcp", address: "198.51.100.1:80", wantIs: syscall.ENETUNREACH,
			wantErr: "client: dial tcp 198.51.100.1:80: network is unreachable"},
		{name: "host name", network: "tcp", address: "example.com:80", wantIs: netx.ErrNoResolver},
		{name: "ipv6", network: "tcp6", address: "[2001:db8::1]:80", wantErr: "client: dial tcp6: unknown network tcp6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Dial(ctxT(t, 5*time.Second), tt.network, tt.address)
			require.Error(t, err)
			var oe *net.OpError
			assert.ErrorAs(t, err, &oe)
			if tt.wantIs != nil {
				assert.ErrorIs(t, err, tt.wantIs)
			}
			if tt.wantErr != "" {
				assert.EqualError(t, err, tt.wantErr)
			}
		})
	}
}
