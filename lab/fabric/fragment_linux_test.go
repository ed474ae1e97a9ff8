package fabric_test

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
)

// mtuWorld: a kernel host on a LAN (MTU 1500) behind a port-restricted
// NAT whose uplink, the internet, has MTU wanMTU; a server there.
func mtuWorld(t *testing.T, wanMTU int) (*fabric.Fabric, *fabric.KernelHost, *fabric.Host) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, TUN devices)")
	}
	for _, tool := range []string{"ip", "nsenter", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make deps installs it)", tool)
		}
	}
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	f, err := fabric.New(fabric.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "internet", Prefix: netip.MustParsePrefix("203.0.113.0/24"), MTU: wanMTU})
	require.NoError(t, err)
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "lan", Prefix: netip.MustParsePrefix("192.168.1.0/24")})
	require.NoError(t, err)
	cfg, err := nat.Profile("port-restricted-cone")
	require.NoError(t, err)
	_, err = f.AddRouter(fabric.RouterConfig{Name: "gw", Uplink: "wan", NAT: &cfg, Interfaces: []fabric.InterfaceConfig{
		{Name: "lan", Network: "lan", Addr: netip.MustParseAddr("192.168.1.1")},
		{Name: "wan", Network: "internet", Addr: netip.MustParseAddr("203.0.113.1")},
	}})
	require.NoError(t, err)
	server, err := f.AddHost(fabric.HostConfig{Name: "server", Interfaces: []fabric.InterfaceConfig{
		{Network: "internet", Addr: netip.MustParseAddr("203.0.113.100")}}})
	require.NoError(t, err)
	k, err := f.AddKernelHost(fabric.KernelHostConfig{Name: fmt.Sprintf("kf%d", os.Getpid()%10000),
		Interface: fabric.InterfaceConfig{Network: "lan", Addr: netip.MustParseAddr("192.168.1.2")}, Gateway: netip.MustParseAddr("192.168.1.1")})
	require.NoError(t, err)
	return f, k, server
}

// TestFragmentsThroughNAT: a 3000-byte UDP datagram from a kernel host
// crosses the NAT in fragments and arrives whole, with the NAT's address;
// so it does where the internet's MTU is 1280 and the router splits the
// kernel's 1500-byte fragments again.
func TestFragmentsThroughNAT(t *testing.T) {
	for _, mtu := range []int{1500, 1280} {
		t.Run(fmt.Sprint(mtu), func(t *testing.T) {
			f, k, server := mtuWorld(t, mtu)
			ln, err := server.ListenPacket(t.Context(), "udp4", "203.0.113.100:7000")
			require.NoError(t, err)
			defer ln.Close()
			c, err := k.ListenPacket(t.Context(), "udp4", ":0")
			require.NoError(t, err)
			defer c.Close()
			msg := bytes.Repeat([]byte("0123456789abcdef"), 3000/16+1)[:3000]
			dst := net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.100:7000"))
			buf := make([]byte, 8192)
			var n int
			var from net.Addr
			for try := 0; ; try++ {
				_, err := c.WriteTo(msg, dst)
				require.NoError(t, err)
				require.NoError(t, ln.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
				if n, from, err = ln.ReadFrom(buf); err == nil {
					break
				}
				require.Less(t, try, 30, "no datagram: router %+v nat %+v", f.Router("gw").Stats(), f.Router("gw").NAT().Stats())
			}
			assert.Equal(t, msg, buf[:n], "the datagram arrives whole")
			assert.Equal(t, "203.0.113.1", netip.MustParseAddrPort(from.String()).Addr().String(), "from the NAT's address")
			st := f.Router("gw").NAT().Stats()
			assert.GreaterOrEqual(t, st.Fragments, uint64(3))
			if mtu == 1280 {
				assert.Positive(t, f.Router("gw").Stats().Fragmented, "the router fragmented for the 1280-byte link")
			}
		})
	}
}

// TestPMTU: ping with DF set across the 1280-byte internet gets ICMP
// "fragmentation needed" naming 1280 from the NAT router, and the kernel's
// path MTU then says 1280; a ping that fits passes.
func TestPMTU(t *testing.T) {
	f, k, _ := mtuWorld(t, 1280)
	in := func(args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"--net=" + k.NetnsPath()}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := in("ping", "-c", "1", "-W", "2", "-M", "do", "-s", "1400", "203.0.113.100")
	assert.Error(t, err, out)
	assert.Contains(t, out, "Frag needed and DF set (mtu = 1280)", out)
	assert.Positive(t, f.Router("gw").Stats().ICMPSent)
	out, err = in("ip", "route", "get", "203.0.113.100")
	require.NoError(t, err, out)
	assert.Contains(t, out, "mtu 1280", "the kernel learned the path MTU")
	out, err = in("ping", "-c", "1", "-W", "2", "-M", "do", "-s", "1400", "203.0.113.100")
	assert.Error(t, err, out)
	assert.Contains(t, out, "mtu=1280", "now refused locally: %s", out)
	out, err = in("ping", "-c", "1", "-W", "5", "-M", "do", "-s", "1252", "203.0.113.100")
	require.NoError(t, err, out)
	assert.Contains(t, out, "1 received")
}
