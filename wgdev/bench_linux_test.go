package wgdev

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/latticelab/lattice/internal/benchtest"
	"github.com/latticelab/lattice/internal/netns"
	"github.com/latticelab/lattice/meshtest"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/node"
)

// BenchmarkDataPath/kernel measures TCP goodput between two nodes whose
// interfaces are real TUN devices in two network namespaces (the kernel's
// TCP on both ends), over the direct path on loopback, with the same
// 64 KiB writes as netstack's BenchmarkDataPath:
//
//   - kernel/inprocess: wireguard-go in process on the node's Bind at
//     both ends (today's regular node);
//   - kernel/bridge: node A's WireGuard is a stock wireguard-go device on
//     its own UDP socket (kernel WireGuard's shape), reached through the
//     Bridge; node B as above.
//
// Run both in one invocation and compare their Gbit/s.
func BenchmarkDataPath(b *testing.B) {
	b.Run("kernel", func(b *testing.B) {
		b.Run("inprocess", func(b *testing.B) {
			send, recv := tunPair(b, false)
			benchtest.TCP(b, send, recv)
		})
		b.Run("bridge", func(b *testing.B) {
			send, recv := tunPair(b, true)
			benchtest.TCP(b, send, recv)
		})
	})
}

// tunPair starts control and a relay on loopback and two nodes on it, A
// (through the bridge if bridged) with its TUN in namespace A and B with
// its TUN in namespace B, waits for the direct path and returns a TCP
// connection from A to B.
func tunPair(b *testing.B, bridged bool) (send, recv net.Conn) {
	requireUAPI(b)
	if _, err := exec.LookPath("ip"); err != nil {
		b.Skip("needs iproute2's ip command")
	}
	id := os.Getpid() % 100000
	nsA, nsB := fmt.Sprintf("lwgbench-a-%d", id), fmt.Sprintf("lwgbench-b-%d", id)
	for _, ns := range []string{nsA, nsB} {
		_ = exec.Command("ip", "netns", "del", ns).Run()
		ipCmd(b, "netns", "add", ns)
		b.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		ipCmd(b, "-n", ns, "link", "set", "lo", "up")
	}
	w := meshtest.Start(b)
	start := func(name string, edit func(*node.Config)) *node.Node {
		cfg := node.Config{Name: name, Network: netx.OS, Control: w.NATSURL, Token: meshtest.Token,
			ListenPort: -1, ListenAddr: w.Addr, Logger: testLogger()}
		edit(&cfg)
		ctx, cancel := context.WithTimeout(b.Context(), 20*time.Second)
		defer cancel()
		n, err := node.Start(ctx, cfg)
		require.NoError(b, err)
		b.Cleanup(func() { n.Close() })
		return n
	}
	provA := &nsTUN{ns: nsA, name: fmt.Sprintf("lwbta%d", id)}
	a := start("alpha", func(c *node.Config) {
		if bridged {
			c.Device = &standIn{name: provA.name, prov: provA}
		} else {
			c.Provisioner = provA
		}
	})
	bn := start("beta", func(c *node.Config) { c.Provisioner = &nsTUN{ns: nsB, name: fmt.Sprintf("lwbtb%d", id)} })
	waitPath(b, a, node.PathDirect, 20*time.Second)
	waitPath(b, bn, node.PathDirect, 20*time.Second)

	server := netip.AddrPortFrom(bn.Address().Addr(), 5201).String()
	var ln net.Listener
	require.NoError(b, netns.Do("/run/netns/"+nsB, func() (err error) {
		ln, err = net.Listen("tcp", server)
		return err
	}))
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	require.NoError(b, netns.Do("/run/netns/"+nsA, func() (err error) {
		send, err = (&net.Dialer{Timeout: 10 * time.Second}).Dial("tcp", server)
		return err
	}))
	recv = <-accepted
	require.NotNil(b, recv, "accept failed")
	return send, recv
}

// nsTUN is a node.Provisioner: a TUN device in a network namespace with
// the overlay address on it.
type nsTUN struct{ ns, name string }

func (p *nsTUN) Up(_ context.Context, addr netip.Prefix, mtu int) (tun.Device, error) {
	var dev tun.Device
	if err := netns.Do("/run/netns/"+p.ns, func() (err error) {
		dev, err = tun.CreateTUN(p.name, mtu)
		return err
	}); err != nil {
		return nil, fmt.Errorf("TUN in %s: %w", p.ns, err)
	}
	for _, args := range [][]string{{"-n", p.ns, "addr", "add", addr.String(), "dev", p.name}, {"-n", p.ns, "link", "set", p.name, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			dev.Close()
			return nil, fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return fixedMTU{dev, mtu}, nil
}

// fixedMTU reports the MTU the device was made with: NativeTun.MTU looks
// the interface up by name in the namespace of whichever thread asks.
type fixedMTU struct {
	tun.Device
	mtu int
}

func (f fixedMTU) MTU() (int, error) { return f.mtu, nil }

func ipCmd(tb testing.TB, args ...string) {
	tb.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(tb, err, "ip %s: %s", strings.Join(args, " "), out)
}
