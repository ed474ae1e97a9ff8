package fabric

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/link"
	"github.com/latticelab/lattice/lab/nat"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// TestBadTopology checks that every kind of broken topology is refused with
// an error naming the element at fault, and that the refusal leaves the
// fabric as it was.
func TestBadTopology(t *testing.T) {
	type step func(f *Fabric) error
	net := func(name, prefix string) step {
		return func(f *Fabric) error {
			_, err := f.AddNetwork(NetworkConfig{Name: name, Prefix: pfx(prefix)})
			return err
		}
	}
	host := func(cfg HostConfig) step {
		return func(f *Fabric) error { _, err := f.AddHost(cfg); return err }
	}
	router := func(cfg RouterConfig) step {
		return func(f *Fabric) error { _, err := f.AddRouter(cfg); return err }
	}
	ifc := func(network, addr string) InterfaceConfig {
		return InterfaceConfig{Network: network, Addr: ip(addr)}
	}
	base := []step{net("a", "192.168.1.0/24"), net("b", "192.168.1.0/24"), net("c", "10.0.0.0/24"), net("d", "10.0.1.0/24")}

	tests := []struct {
		name  string
		setup []step
		bad   step
		want  []string // substrings of the error
	}{
		{"overlap joined without NAT", base,
			router(RouterConfig{Name: "r1", Interfaces: []InterfaceConfig{ifc("a", "192.168.1.1"), ifc("b", "192.168.1.254")}}),
			[]string{`"r1" attaches to overlapping`, `"a"`, `"b"`}},
		{"overlap reachable without NAT", append(base[:len(base):len(base)],
			router(RouterConfig{Name: "r1", Interfaces: []InterfaceConfig{ifc("a", "192.168.1.1"), ifc("c", "10.0.0.1")}})),
			router(RouterConfig{Name: "r2", Interfaces: []InterfaceConfig{ifc("b", "192.168.1.1"), ifc("c", "10.0.0.2")}}),
			[]string{`router "r2"`, "overlap", "no NAT"}},
		{"address outside its segment", base,
			host(HostConfig{Name: "h1", Interfaces: []InterfaceConfig{ifc("c", "10.9.9.9")}}),
			[]string{"h1", "10.9.9.9", `outside network "c" (10.0.0.0/24)`}},
		{"network address", base,
			host(HostConfig{Name: "h1", Interfaces: []InterfaceConfig{ifc("c", "10.0.0.0")}}),
			[]string{"h1", "network or broadcast"}},
		{"duplicate address", append(base[:len(base):len(base)], host(HostConfig{Name: "h1", Interfaces: []InterfaceConfig{ifc("c", "10.0.0.5")}})),
			host(HostConfig{Name: "h2", Interfaces: []InterfaceConfig{ifc("c", "10.0.0.5")}}),
			[]string{"h2", "10.0.0.5", "already used by h1"}},
		{"duplicate host name", append(base[:len(base):len(base)], host(HostConfig{Name: "h1", Interfaces: []InterfaceConfig{ifc("c", "10.0.0.5")}})),
			host(HostConfig{Name: "h1", Interfaces: []InterfaceConfig{ifc("c", "10.0.0.6")}}),
			[]string{`"h1"`, "already used"}},
		{"duplicate network", base, net("a", "172.16.0.0/12"), []string{`network "a" already exists`}},
		{"host bits in prefix", base, net("e", "172.16.0.1/12"), []string{`network "e"`, "did you mean 172.16.0.0/12"}},
		{"unknown network", base,
			host(HostConfig{Name: "h1", Interfaces: []InterfaceConfig{ifc("nope", "10.0.0.5")}}),
			[]string{"h1", `unknown network "nope"`}},
		{"gateway off-link", base,
			host(HostConfig{Name: "h1", Interfaces: []InterfaceConfig{ifc("c", "10.0.0.5")}, Gateway: ip("10.0.1.1")}),
			[]string{`"h1"`, "10.0.1.1", "not on any of its networks"}},
		{"route loop", append(base[:len(base):len(base)],
			router(RouterConfig{Name: "r1", Interfaces: []InterfaceConfig{ifc("c", "10.0.0.1"), ifc("d", "10.0.1.1")},
				Routes: []Route{{Dst: pfx("172.16.0.0/12"), Via: ip("10.0.1.2")}}})),
			router(RouterConfig{Name: "r2", Interfaces: []InterfaceConfig{ifc("d", "10.0.1.2")},
				Routes: []Route{{Dst: pfx("172.16.0.0/12"), Via: ip("10.0.1.1")}}}),
			[]string{"route loop for 172.16.0.0/12", "r1", "r2"}},
		{"zero rate is not a rate", base,
			host(HostConfig{Name: "h1", Interfaces: []InterfaceConfig{{Network: "c", Addr: ip("10.0.0.5"), Egress: link.Impairments{Rate: -5}}}}),
			[]string{"h1", "egress", "rate"}},
		{"loss over 100%", base,
			host(HostConfig{Name: "h1", Interfaces: []InterfaceConfig{{Network: "c", Addr: ip("10.0.0.5"), Ingress: link.Impairments{Loss: 1.5}}}}),
			[]string{"h1", "ingress", "loss"}},
		{"NAT without uplink", base,
			router(RouterConfig{Name: "r1", Interfaces: []InterfaceConfig{ifc("c", "10.0.0.1"), ifc("d", "10.0.1.1")}, NAT: &nat.Config{}}),
			[]string{`router "r1"`, "uplink"}},
		{"unknown uplink", base,
			router(RouterConfig{Name: "r1", Interfaces: []InterfaceConfig{ifc("c", "10.0.0.1")}, Uplink: "wan0", NAT: &nat.Config{}}),
			[]string{`router "r1"`, `uplink "wan0"`}},
		{"bad NAT config", base,
			router(RouterConfig{Name: "r1", Interfaces: []InterfaceConfig{{Name: "lan", Network: "c", Addr: ip("10.0.0.1")}, {Name: "wan", Network: "d", Addr: ip("10.0.1.1")}},
				Uplink: "wan", NAT: &nat.Config{PortMin: 5000, PortMax: 4000}}),
			[]string{`router "r1"`, "port range"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := New(Config{})
			require.NoError(t, err)
			defer f.Close()
			for _, s := range tc.setup {
				require.NoError(t, s(f))
			}
			err = tc.bad(f)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalid), "error %q does not wrap ErrInvalid", err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			// Nothing stored is lost, and the refused names are free again.
			for _, n := range []string{"a", "b", "c", "d"} {
				assert.NotNil(t, f.Network(n))
			}
			assert.Nil(t, f.Host("h2"))
			assert.Nil(t, f.Router("r2"))
		})
	}
}

func TestUnknownProfileAndRate(t *testing.T) {
	_, err := nat.Profile("fancy-cone")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown profile "fancy-cone"`)
	assert.Contains(t, err.Error(), "port-restricted-cone", "the error lists the known profiles")
	for _, s := range []string{"0", "0mbit", "-10mbit", "fast"} {
		_, err := link.ParseRate(s)
		assert.Error(t, err, "rate %q", s)
	}
}

// TestRefusedElementLeavesFabricWorking adds a broken router next to a
// working topology and checks that traffic still flows afterwards.
func TestRefusedElementLeavesFabricWorking(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "full-cone"), 1)
	_, err := w.f.AddRouter(RouterConfig{Name: "bad", Interfaces: []InterfaceConfig{
		{Network: "internet", Addr: serverIP}, // taken by the server
	}})
	require.Error(t, err)
	_, err = s.hosts[0].Ping(ctxT(t, 5*time.Second), serverIP)
	require.NoError(t, err)
	// The name is free again.
	_, err = w.f.AddRouter(RouterConfig{Name: "bad", Interfaces: []InterfaceConfig{{Network: "internet", Addr: ip("203.0.113.99")}}})
	require.NoError(t, err)
}

// TestRouteLoopWithReusedAddresses builds two sites that reuse the same
// router addresses, one with a loop, in both orders: the loop is found
// whichever site came first.
func TestRouteLoopWithReusedAddresses(t *testing.T) {
	for _, loopFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("loop-site-first=%t", loopFirst), func(t *testing.T) {
			f, err := New(Config{})
			require.NoError(t, err)
			defer f.Close()
			for _, n := range []string{"site-a", "site-b"} {
				_, err := f.AddNetwork(NetworkConfig{Name: n, Prefix: lan})
				require.NoError(t, err)
			}
			clean := func() {
				for i, name := range []string{"a1", "a2"} {
					_, err := f.AddRouter(RouterConfig{Name: name, Interfaces: []InterfaceConfig{{Network: "site-a", Addr: ip(fmt.Sprintf("192.168.1.%d", i+1))}}})
					require.NoError(t, err)
				}
			}
			loop := func() error {
				if _, err := f.AddRouter(RouterConfig{Name: "b1", Interfaces: []InterfaceConfig{{Network: "site-b", Addr: ip("192.168.1.1")}},
					Routes: []Route{{Dst: pfx("172.16.0.0/12"), Via: ip("192.168.1.2")}}}); err != nil {
					return err
				}
				_, err := f.AddRouter(RouterConfig{Name: "b2", Interfaces: []InterfaceConfig{{Network: "site-b", Addr: ip("192.168.1.2")}},
					Gateway: ip("192.168.1.1")})
				return err
			}
			if !loopFirst {
				clean()
			}
			err = loop()
			require.Error(t, err)
			assert.Contains(t, err.Error(), "route loop for 172.16.0.0/12")
			assert.Contains(t, err.Error(), "b1")
			if loopFirst {
				clean() // a clean site with the same addresses is fine
			}
		})
	}
}

// TestSeedRepeatable builds the same topology twice with one seed: the
// ephemeral port a host picks, and so the NAT mapping, are the same.
func TestSeedRepeatable(t *testing.T) {
	mapped := func(seed uint64) string {
		w := newWorld(t, Config{Seed: seed})
		s := w.addSite(t, profile(t, "port-restricted-cone"), 1)
		ctx := ctxT(t, 5*time.Second)
		spc, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:3478")
		require.NoError(t, err)
		defer spc.Close()
		go udpEcho(spc)
		c, err := s.hosts[0].ListenPacket(ctx, "udp4", ":0")
		require.NoError(t, err)
		defer c.Close()
		got, _, err := roundTrip(c, netip.MustParseAddrPort("203.0.113.100:3478"), "x", 2*time.Second)
		require.NoError(t, err)
		return got
	}
	a, b, c := mapped(7), mapped(7), mapped(8)
	assert.Equal(t, a, b, "same seed, same mapping")
	assert.NotEqual(t, a, c, "another seed, another port")
}
