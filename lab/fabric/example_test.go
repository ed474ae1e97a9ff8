package fabric_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
)

// A laptop behind a home NAT reaches a server on the emulated internet.
func Example() {
	f, err := fabric.New(fabric.Config{Seed: 1})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	must := func(_ any, err error) {
		if err != nil {
			panic(err)
		}
	}
	must(f.AddNetwork(fabric.NetworkConfig{Name: "internet", Prefix: netip.MustParsePrefix("203.0.113.0/24")}))
	must(f.AddNetwork(fabric.NetworkConfig{Name: "home", Prefix: netip.MustParsePrefix("192.168.1.0/24")}))
	cfg, err := nat.Profile("port-restricted-cone")
	must(nil, err)
	must(f.AddRouter(fabric.RouterConfig{Name: "home-nat", Uplink: "wan", NAT: &cfg, Interfaces: []fabric.InterfaceConfig{
		{Name: "lan", Network: "home", Addr: netip.MustParseAddr("192.168.1.1")},
		{Name: "wan", Network: "internet", Addr: netip.MustParseAddr("203.0.113.10")},
	}}))
	server, err := f.AddHost(fabric.HostConfig{Name: "server",
		Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: netip.MustParseAddr("203.0.113.100")}}})
	must(nil, err)
	laptop, err := f.AddHost(fabric.HostConfig{Name: "laptop", Gateway: netip.MustParseAddr("192.168.1.1"),
		Interfaces: []fabric.InterfaceConfig{{Network: "home", Addr: netip.MustParseAddr("192.168.1.2")}}})
	must(nil, err)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := server.Listen(ctx, "tcp", "203.0.113.100:443")
	must(nil, err)
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			from := netip.MustParseAddrPort(c.RemoteAddr().String())
			fmt.Println("server: connection from", from.Addr()) // the NAT's public address
			c.Close()
		}
	}()
	conn, err := laptop.Dial(ctx, "tcp", "203.0.113.100:443")
	must(nil, err)
	buf := make([]byte, 1)
	_, _ = conn.Read(buf) // until the server closes
	conn.Close()
	// Output: server: connection from 203.0.113.10
}
