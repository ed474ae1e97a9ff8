package scenarios_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/topology"
)

// pairSite is what ICE theory needs of one side of a pair.
type pairSite struct {
	profile    string // the innermost NAT router's profile
	has4, has6 bool
}

// theoryPath is ICE theory's path for a pair (node's expectDirect and
// expectDirectDualStack, over the sites a topology builds): direct over
// IPv6 when both sides have it, since nothing translates IPv6 and each
// side's checks open its own RFC 6092 filter; else direct over IPv4 when
// both have it, UDP gets out, and no symmetric NAT meets a NAT that
// filters on port; else the relay.
func theoryPath(a, b pairSite) string {
	if a.has6 && b.has6 {
		return "direct"
	}
	if !a.has4 || !b.has4 || a.profile == "udp-blocked" || b.profile == "udp-blocked" {
		return "relay"
	}
	portFiltering := func(p string) bool { return p == "symmetric" || p == "port-restricted-cone" }
	if (a.profile == "symmetric" && portFiltering(b.profile)) || (b.profile == "symmetric" && portFiltering(a.profile)) {
		return "relay"
	}
	return "direct"
}

func siteOf(t *testing.T, p *topology.Plan, node string) pairSite {
	t.Helper()
	n := p.Node(node)
	require.NotNil(t, n, "node %s", node)
	innermost, _, _ := strings.Cut(p.NATLabel(n), " behind ")
	s := pairSite{profile: strings.TrimSuffix(strings.TrimSuffix(innermost, " + IPv6"), "*")}
	for _, ifc := range p.Host(n.Host).Config.Interfaces {
		for _, a := range append(slices.Clone(ifc.Aliases), ifc.Addr) {
			s.has4, s.has6 = s.has4 || a.Is4(), s.has6 || a.Is6()
		}
	}
	return s
}

var expectedHeader = regexp.MustCompile(`(?m)^# NAT-pair matrix.*expected path: (direct|relay)\.$`)

// TestPairFilesMatchTheory: every pair-A+B file expects, in its header
// and in its wait_path steps both ways, the path ICE theory gives for its
// two nodes' sites, so the matrix cannot drift from the theory the node
// tests check (node's TestPathMatrix and TestPathMatrixDualStack).
func TestPairFilesMatchTheory(t *testing.T) {
	files, err := filepath.Glob("pair-*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 21+8, "the 21 IPv4 pairs and the IPv6 firewall's 8")
	for _, file := range files {
		t.Run(strings.TrimSuffix(file, ".yaml"), func(t *testing.T) {
			f, err := scenario.Load(file)
			require.NoError(t, err)
			require.Len(t, f.Nodes, 2)
			a, b := siteOf(t, f.Plan(), f.Nodes[0]), siteOf(t, f.Plan(), f.Nodes[1])
			want := theoryPath(a, b)
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			m := expectedHeader.FindSubmatch(raw)
			require.NotNil(t, m, "no '# NAT-pair matrix ... expected path: X.' header")
			assert.Equal(t, want, string(m[1]), "header, for %+v and %+v", a, b)
			seen := map[string]bool{}
			for _, s := range f.Steps {
				if w := s.WaitPath; w != nil {
					assert.Equal(t, want, w.Path, "wait_path %s → %s", w.From, w.To)
					seen[fmt.Sprint(w.From, w.To)] = true
				}
			}
			assert.True(t, seen[fmt.Sprint(f.Nodes[0], f.Nodes[1])] && seen[fmt.Sprint(f.Nodes[1], f.Nodes[0])], "wait_path both ways")
		})
	}
}
