package fabric_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/labtest"
	"github.com/latticelab/lattice/stun"
)

// TestKernelHostAliases: a kernel host holds its aliases too, so a
// two-address RFC 5780 STUN server runs on the kernel's sockets there, and
// a client behind a lab NAT classifies that NAT against it.
func TestKernelHostAliases(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, TUN devices)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (make deps installs it)")
	}
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	w := labtest.New(t, fabric.Config{})
	site := w.Site(t, "symmetric")
	primary, alias := netip.MustParseAddr("203.0.113.50"), netip.MustParseAddr("203.0.113.51")
	k, err := w.Fabric.AddKernelHost(fabric.KernelHostConfig{Name: fmt.Sprintf("ka%d", os.Getpid()%10000),
		Interface: fabric.InterfaceConfig{Network: "internet", Addr: primary, Aliases: []netip.Addr{alias}}})
	require.NoError(t, err)
	out, err := exec.Command("ip", "-n", k.Netns(), "-4", "-o", "addr", "show", "eth0").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "203.0.113.50/24")
	assert.Contains(t, string(out), "203.0.113.51/24")

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	srv, err := stun.NewServer(stun.Config{Network: k, Primary: netip.AddrPortFrom(primary, 3478), Alternate: netip.AddrPortFrom(alias, 3479)})
	require.NoError(t, err)
	require.NoError(t, srv.Start(ctx))
	defer srv.Close()
	res, err := stun.Discover(ctx, site.Host, srv.Addr(), stun.Options{Wait: 300 * time.Millisecond, Tries: 2})
	require.NoError(t, err)
	assert.Equal(t, stun.AddressAndPortDependent, res.Mapping, "%+v", res)
	assert.Equal(t, stun.AddressAndPortDependent, res.Filtering, "%+v", res)
	assert.True(t, res.NATed)
	assert.Equal(t, netip.AddrPortFrom(alias, 3479), res.Other, "OTHER-ADDRESS is the alias")
}
