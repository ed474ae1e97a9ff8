package sandbox

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/latticelab/lattice/runsc"
)

// TestPeerHosts: gvisor mode's /etc/hosts answers the names pod mode's
// resolver does (NAME and NAME.lattice), skips peers it cannot name or
// place, and does not depend on the order peers arrived in.
func TestPeerHosts(t *testing.T) {
	web := netip.MustParseAddr("100.64.0.2")
	db := netip.MustParseAddr("100.64.0.3")
	for _, tc := range []struct {
		name  string
		peers []nodePeer
		want  []runsc.HostEntry
	}{
		{name: "none"},
		{
			name:  "sorted by name",
			peers: []nodePeer{{name: "web", addr: web}, {name: "db", addr: db}},
			want: []runsc.HostEntry{
				{Addr: db, Names: []string{"db", "db.lattice"}},
				{Addr: web, Names: []string{"web", "web.lattice"}},
			},
		},
		{
			name:  "unnamed and unaddressed skipped",
			peers: []nodePeer{{addr: db}, {name: "web"}, {name: "web", addr: web}},
			want:  []runsc.HostEntry{{Addr: web, Names: []string{"web", "web.lattice"}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, peerHosts(tc.peers))
		})
	}
}
