package fabric

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/lab/nat"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	internet = netip.MustParsePrefix("203.0.113.0/24")
	lan      = netip.MustParsePrefix("192.168.1.0/24")
	// serverIP and serverAlt are the public server's two addresses.
	serverIP  = netip.MustParseAddr("203.0.113.100")
	serverAlt = netip.MustParseAddr("203.0.113.101")
)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

// site is a LAN behind a router on the internet segment.
type site struct {
	router *Router
	hosts  []*Host
}

// world is the standard test topology: an "internet" segment with a public
// server (two addresses) and any number of NATed sites, every one of them
// 192.168.1.0/24 as real homes are.
type world struct {
	f      *Fabric
	server *Host
	sites  []*site
}

func newWorld(t testing.TB, cfg Config) *world {
	t.Helper()
	f, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	_, err = f.AddNetwork(NetworkConfig{Name: "internet", Prefix: internet})
	require.NoError(t, err)
	server, err := f.AddHost(HostConfig{Name: "server", Interfaces: []InterfaceConfig{{Network: "internet", Addr: serverIP, Aliases: []netip.Addr{serverAlt}}}})
	require.NoError(t, err)
	return &world{f: f, server: server}
}

// addSite adds a LAN with nHosts hosts behind a router whose uplink is
// 203.0.113.(10+index); natCfg nil means plain routing (no NAT).
func (w *world) addSite(t testing.TB, natCfg *nat.Config, nHosts int) *site {
	t.Helper()
	i := len(w.sites)
	lanName := "lan" + string(rune('a'+i))
	_, err := w.f.AddNetwork(NetworkConfig{Name: lanName, Prefix: lan})
	require.NoError(t, err)
	wan := netip.AddrFrom4([4]byte{203, 0, 113, byte(10 + i)})
	r, err := w.f.AddRouter(RouterConfig{
		Name: "nat" + string(rune('a'+i)),
		Interfaces: []InterfaceConfig{
			{Name: "lan", Network: lanName, Addr: ip("192.168.1.1")},
			{Name: "wan", Network: "internet", Addr: wan},
		},
		Uplink: "wan",
		NAT:    natCfg,
	})
	require.NoError(t, err)
	s := &site{router: r}
	for j := range nHosts {
		h, err := w.f.AddHost(HostConfig{
			Name:       lanName + "-h" + string(rune('0'+j)),
			Interfaces: []InterfaceConfig{{Network: lanName, Addr: netip.AddrFrom4([4]byte{192, 168, 1, byte(2 + j)})}},
			Gateway:    ip("192.168.1.1"),
		})
		require.NoError(t, err)
		s.hosts = append(s.hosts, h)
	}
	w.sites = append(w.sites, s)
	return s
}

func profile(t testing.TB, name string) *nat.Config {
	t.Helper()
	c, err := nat.Profile(name)
	require.NoError(t, err)
	return &c
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// udpEcho serves on pc until it is closed, answering each datagram with the
// sender's address as text.
func udpEcho(pc net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo([]byte(from.String()), from)
	}
}

// tcpEcho accepts on l until it is closed and echoes every connection.
func tcpEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// roundTrip sends msg from pc to dst and waits up to wait for an answer.
func roundTrip(pc net.PacketConn, dst netip.AddrPort, msg string, wait time.Duration) (string, net.Addr, error) {
	if _, err := pc.WriteTo([]byte(msg), net.UDPAddrFromAddrPort(dst)); err != nil {
		return "", nil, err
	}
	_ = pc.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 2048)
	n, from, err := pc.ReadFrom(buf)
	if err != nil {
		return "", nil, err
	}
	return string(buf[:n]), from, nil
}
