package runner

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/topology"
)

// TestNodeReach: where each kind of node is told control is, and the
// NATS addresses control advertises, without a DNS64 in the topology
// (the scenarios nat64-mobile-* cover the lookups through one).
func TestNodeReach(t *testing.T) {
	const nets = `
networks:
  internet: {cidr: 203.0.113.0/24%s}
  home: {cidr: 192.168.1.0/24, uplink: internet, nat: full-cone}
  lte: {cidr6: "2001:db8:64::/64", uplink: internet, nat: {profile: nat64, prefix64: "2001:db8:46::/96"}}
hosts: {server: {network: internet, addr: 203.0.113.100}}
control: {host: server, port: 443}
nodes: {laptop: {network: home}, phone: {network: lte}}
`
	for _, tc := range []struct {
		name, cidr6               string
		laptop, phone, advertised string
		nat64                     string
	}{
		{"IPv4-only internet", "",
			"nats://203.0.113.100:443?insecure=1", "nats://[2001:db8:46::cb00:7164]:443?insecure=1",
			"nats://203.0.113.100:443,nats://[2001:db8:46::cb00:7164]:443", "2001:db8:46::/96"},
		{"dual-stack internet", `, cidr6: "2001:db8::/64"`,
			"nats://203.0.113.100:443?insecure=1", "nats://[2001:db8::64]:443?insecure=1",
			"nats://203.0.113.100:443,nats://[2001:db8::64]:443", "2001:db8:46::/96"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p, err := topology.Parse("t.yaml", []byte(fmt.Sprintf(nets, tc.cidr6)))
			require.NoError(t, err)
			l := &Lab{plan: p}
			laptop, err := l.nodeReach(context.Background(), p.Node("laptop"))
			require.NoError(t, err)
			assert.Equal(t, reach{control: tc.laptop}, laptop)
			phone, err := l.nodeReach(context.Background(), p.Node("phone"))
			require.NoError(t, err)
			assert.Equal(t, reach{control: tc.phone, nat64: netip.MustParsePrefix(tc.nat64)}, phone)
			assert.Equal(t, tc.advertised, l.advertiseNATS())
		})
	}
}
