package netstack

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/latticelab/lattice/internal/netns"

	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/tun"
)

// requireKernelNet skips tb unless it may create network namespaces and
// TUN devices.
func requireKernelNet(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("kernel: needs root for network namespaces and TUN devices")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		tb.Skipf("kernel: no TUN support: %v", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		tb.Skip("kernel: needs iproute2's ip command")
	}
}

// kernelPair builds what a regular node runs: two network namespaces
// joined by a veth (10.201.0.1 and .2), each with wireguard-go on a real TUN
// device (100.64.0.1 and .2), and returns a TCP connection between the
// overlay addresses, opened by the kernel's TCP in each namespace.
func kernelPair(tb testing.TB) (send, recv net.Conn) {
	tb.Helper()
	k := kernelNets(tb)
	return connect(tb, k.listen, k.dial, k.overB)
}

// kernelNet is kernelPair's two namespaces.
type kernelNet struct {
	nsA, nsB string
	overB    netip.Addr
	listen   listenFunc // in B
	dial     dialFunc   // from A
}

func kernelNets(tb testing.TB) *kernelNet {
	tb.Helper()
	requireKernelNet(tb)
	id := fmt.Sprintf("%d", os.Getpid())
	nsA, nsB := "lattice-bench-a-"+id, "lattice-bench-b-"+id
	vethA, vethB := "lbva"+id, "lbvb"+id
	tunA, tunB := "lbwa"+id, "lbwb"+id
	underA, underB := netip.MustParseAddr("10.201.0.1"), netip.MustParseAddr("10.201.0.2")
	overA, overB := netip.MustParseAddr("100.64.0.1"), netip.MustParseAddr("100.64.0.2")

	for _, ns := range []string{nsA, nsB} {
		// A namespace of the same name can only be a leftover of a
		// killed run of this process ID.
		_ = exec.Command("ip", "netns", "del", ns).Run()
		ipCmd(tb, "netns", "add", ns)
		tb.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	ipCmd(tb, "link", "add", vethA, "netns", nsA, "type", "veth", "peer", "name", vethB, "netns", nsB)
	for _, l := range []struct{ ns, dev string }{{nsA, vethA}, {nsB, vethB}} {
		addr := underA
		if l.ns == nsB {
			addr = underB
		}
		ipCmd(tb, "-n", l.ns, "addr", "add", addr.String()+"/24", "dev", l.dev)
		ipCmd(tb, "-n", l.ns, "link", "set", l.dev, "up")
		ipCmd(tb, "-n", l.ns, "link", "set", "lo", "up")
	}

	node := func(ns, name string, over netip.Addr) *wgNode {
		var n *wgNode
		err := inNetns(ns, func() error {
			tdev, err := tun.CreateTUN(name, DefaultMTU)
			if err != nil {
				return fmt.Errorf("create TUN: %w", err)
			}
			n, err = startWG(tb, fixedMTU{tdev}, conn.NewDefaultBind(), over)
			return err
		})
		require.NoError(tb, err, "wireguard-go in %s", ns)
		ipCmd(tb, "-n", ns, "addr", "add", over.String()+"/24", "dev", name)
		ipCmd(tb, "-n", ns, "link", "set", name, "up")
		return n
	}
	na, nb := node(nsA, tunA, overA), node(nsB, tunB, overB)
	peer(tb, na, nb, underA, underB)

	listen := func(ctx context.Context, network, address string) (ln net.Listener, err error) {
		err = inNetns(nsB, func() error {
			ln, err = new(net.ListenConfig).Listen(ctx, network, address)
			return err
		})
		return ln, err
	}
	dial := func(ctx context.Context, network, address string) (c net.Conn, err error) {
		err = inNetns(nsA, func() error {
			c, err = new(net.Dialer).DialContext(ctx, network, address)
			return err
		})
		return c, err
	}
	return &kernelNet{nsA: nsA, nsB: nsB, overB: overB, listen: listen, dial: dial}
}

// fixedMTU reports the MTU the device was created with. NativeTun.MTU
// looks the interface up by name in the namespace of whichever thread asks,
// and wireguard-go asks from threads outside the device's namespace.
type fixedMTU struct{ tun.Device }

func (fixedMTU) MTU() (int, error) { return DefaultMTU, nil }

// inNetns runs fn inside the named namespace (see netns.Do).
func inNetns(name string, fn func() error) error { return netns.Do("/run/netns/"+name, fn) }

func ipCmd(tb testing.TB, args ...string) {
	tb.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(tb, err, "ip %s: %s", strings.Join(args, " "), out)
}
