package netstack

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/latticelab/lattice/internal/benchtest"

	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/conn"
	wgnetstack "golang.zx2c4.com/wireguard/tun/netstack"
)

// BenchmarkDataPath measures TCP goodput between two overlay addresses
// through two wireguard-go devices talking UDP over the loopback interface,
// with the same 64 KiB writes as lab/fabric's BenchmarkFabricTCP:
//
//   - pod: two Stacks, wireguard-go on our TUNAdapter (pod mode);
//   - wgnetstack: wireguard-go's own tun/netstack, the baseline;
//   - kernel: wireguard-go on real TUN devices in two network namespaces
//     joined by a veth, with the kernel's TCP (root only);
//   - gvisor: as kernel, but the sender runs in a runsc container with
//     --network=host, as a gvisor-mode agent does (root and runsc).
//
// Run them in one invocation and compare their Gbit/s. All but gvisor also
// report cpu-ns/KiB (benchtest.TCP): this process's CPU per KiB carried,
// both ends together. For pod and wgnetstack that is the whole path; for
// kernel it leaves out the kernel's TCP and TUN work that runs in softirq
// context outside this process's accounting (see benchtest.TCP), so it
// reads low. gvisor's sender runs in a runsc sandbox whose CPU cannot be
// told apart from the container's start, so it reports goodput only.
func BenchmarkDataPath(b *testing.B) {
	b.Run("pod", func(b *testing.B) {
		sa, sb := wgPair(b)
		send, recv := connect(b, sb.Listen, sa.Dial, addrB.Addr())
		benchtest.TCP(b, send, recv)
	})
	b.Run("wgnetstack", func(b *testing.B) {
		send, recv := wgnetstackPair(b)
		benchtest.TCP(b, send, recv)
	})
	b.Run("kernel", func(b *testing.B) {
		send, recv := kernelPair(b)
		benchtest.TCP(b, send, recv)
	})
	b.Run("gvisor", gvisorSend)
}

type (
	listenFunc func(ctx context.Context, network, address string) (net.Listener, error)
	dialFunc   func(ctx context.Context, network, address string) (net.Conn, error)
)

// connect opens a TCP connection to server:5201 and returns both ends.
func connect(tb testing.TB, listen listenFunc, dial dialFunc, server netip.Addr) (send, recv net.Conn) {
	tb.Helper()
	ctx := ctxT(tb, 10*time.Second)
	ln, err := listen(ctx, "tcp", netip.AddrPortFrom(server, 5201).String())
	require.NoError(tb, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	send, err = dial(ctx, "tcp", netip.AddrPortFrom(server, 5201).String())
	require.NoError(tb, err)
	recv = <-accepted
	require.NotNil(tb, recv, "accept failed")
	return send, recv
}

// wgnetstackPair is wgPair on wireguard-go's stock tun/netstack.
func wgnetstackPair(tb testing.TB) (send, recv net.Conn) {
	tb.Helper()
	ta, na, err := wgnetstack.CreateNetTUN([]netip.Addr{addrA.Addr()}, nil, DefaultMTU)
	require.NoError(tb, err)
	tbdev, nb, err := wgnetstack.CreateNetTUN([]netip.Addr{addrB.Addr()}, nil, DefaultMTU)
	require.NoError(tb, err)
	wa := newWGNode(tb, ta, conn.NewDefaultBind(), addrA.Addr())
	wb := newWGNode(tb, tbdev, conn.NewDefaultBind(), addrB.Addr())
	peer(tb, wa, wb, localhost, localhost)
	listen := func(_ context.Context, _, address string) (net.Listener, error) {
		return nb.ListenTCPAddrPort(netip.MustParseAddrPort(address))
	}
	dial := func(ctx context.Context, _, address string) (net.Conn, error) {
		return na.DialContextTCPAddrPort(ctx, netip.MustParseAddrPort(address))
	}
	return connect(tb, listen, dial, addrB.Addr())
}
