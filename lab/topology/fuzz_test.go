package topology

import (
	"errors"
	"os"
	"testing"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/fabric"
)

// FuzzParse: any input either fails with position errors or yields a
// plan the fabric accepts as it is.
func FuzzParse(f *testing.F) {
	for _, s := range []string{world, small, world6, world64, worldDNS, "",
		`networks: {a: {cidr: 10.0.0.0/24}, b: {cidr6: "2001:db8:1::/64", uplink: a, nat: nat64}}
dns: {d: {network: b, dns64: "64:ff9b::/96"}}
control: {network: a}
nodes: {n: {network: b}}`,
		`networks: {a: {cidr: 10.0.0.0/24}, b: {cidr6: "2001:db8:1::/64", uplink: a, nat: {profile: nat64, prefix64: "2001:db8:64::/96"}}}`,
		"networks: {a: {cidr: 10.0.0.0/24}}",
		`networks: {a: {cidr6: "2001:db8::/64"}, b: {cidr6: "2001:db8:1::/64", uplink: a, nat: ipv6-firewall}}`,
		`networks: {a: {cidr: 10.0.0.0/24, cidr6: "2001:db8::/64"}, b: {cidr: 10.1.0.0/24, cidr6: "2001:db8:1::/64", uplink: a, nat: cgnat}}`,
		"networks: {a: {cidr: 10.0.0.0/24}, b: {cidr: 10.0.0.0/16, uplink: a}}",
		"networks: {a: {cidr: 10.0.0.0/30}}\nhosts: {h: {network: a}, i: {network: a}, j: {network: a}}",
		"routers: {r: {interfaces: [{network: a}, {network: b}]}}\nnetworks: {a: {cidr: 10.0.0.0/24}, b: {cidr: 10.1.0.0/24}}",
	} {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile("../../topologies/quickstart.yaml"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, p, err := Parse("f.yaml", data)
		if err != nil {
			if p != nil {
				t.Fatal("plan and error both returned")
			}
			if !errors.Is(err, strictyaml.ErrInvalid) && !errors.Is(err, strictyaml.ErrTooLarge) {
				t.Fatalf("error wraps neither ErrInvalid nor ErrTooLarge: %v", err)
			}
			return
		}
		if len(p.Hosts)+len(p.Routers) > 30 || p.NeedsRoot() {
			return // building is slow (namespaces slower); the small ones find the same gaps
		}
		fab, ferr := fabric.New(fabric.Config{})
		if ferr != nil {
			t.Fatal(ferr)
		}
		defer fab.Close()
		if err := p.AddTo(fab); err != nil {
			t.Fatalf("a plan that passed validation does not build: %v\n%s", err, data)
		}
	})
}
