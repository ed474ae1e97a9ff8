package netstack

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// fuzzGateway is a Gateway whose agent end the test holds (agentFD,
// non-blocking), carrying flowA4 direct over an overlay stack at addrA
// (no WireGuard: the test reads the overlay's TUNAdapter itself).
func fuzzGateway(tb testing.TB) (*Gateway, *Stack, int) {
	tb.Helper()
	overlay, err := New(Config{Address: addrA})
	require.NoError(tb, err)
	return directHarness(tb, overlay)
}

// directHarness is fuzzGateway on a given overlay stack.
func directHarness(tb testing.TB, overlay *Stack) (*Gateway, *Stack, int) {
	tb.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	require.NoError(tb, err)
	g, err := NewGateway(GatewayConfig{
		Device: os.NewFile(uintptr(fds[0]), "gateway"), Agent: addrA.Addr(), VnetHdr: true, Overlay: overlay,
		Dial: func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("no dial") },
	})
	require.NoError(tb, err)
	tb.Cleanup(func() {
		require.NoError(tb, g.Close())
		require.NoError(tb, overlay.Close())
		_ = unix.Close(fds[1])
	})
	var vh virtioNetHdr
	syn := flowA4.with(1, header.TCPFlagSyn, nil).bytes()
	deliver, f := g.inbound(&vh, syn, len(syn), nil)
	require.False(tb, deliver)
	require.Nil(tb, f, "a SYN is decided first")
	require.Eventually(tb, func() bool { return overlay.DirectFlows() == 1 }, 5*time.Second, time.Millisecond)
	drainOverlay(tb, overlay.TUN(), func([]byte) {})
	return g, overlay, fds[1]
}

// drainBufs are drainOverlay's, as wireguard-go's TUN reader's.
var drainBufs = sync.OnceValue(func() [][]byte {
	bufs := make([][]byte, BatchSize)
	for i := range bufs {
		bufs[i] = make([]byte, wgOffset+1<<16)
	}
	return bufs
})

// drainOverlay reads every packet queued for WireGuard and passes each to
// check. A marker queued behind them says when it is done (Read blocks
// on an empty queue).
func drainOverlay(tb testing.TB, a *TUNAdapter, check func([]byte)) {
	tb.Helper()
	marker := ipv4Packet(addrA.Addr(), addrB.Addr(), 253, []byte("end of drain"))
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(marker)})
	n := a.queueOut([]*stack.PacketBuffer{pkt})
	pkt.DecRef()
	require.Equal(tb, 1, n, "the queue has room for the marker")
	bufs := drainBufs()
	sizes := make([]int, len(bufs))
	for {
		n, err := a.Read(bufs, sizes, wgOffset)
		require.NoError(tb, err)
		for i := range n {
			p := bufs[i][wgOffset : wgOffset+sizes[i]]
			if bytes.Equal(p, marker) {
				return
			}
			check(p)
		}
	}
}

// FuzzDirectOutbound feeds what an agent's link may carry (a
// virtio_net_hdr, then anything) through the gateway's filter and, for
// packets of the direct flow, on to WireGuard: nothing may panic, and
// every packet WireGuard gets is a whole IPv4 TCP packet of the flow,
// within the overlay's MTU, with checksums that verify.
func FuzzDirectOutbound(f *testing.F) {
	gso := func(size uint16) []byte {
		b := make([]byte, virtioNetHdrLen)
		(&virtioNetHdr{flags: virtioNetHdrFNeedsCsum, gsoType: virtioNetHdrGSOTCPv4, hdrLen: 52, gsoSize: size, csumStart: 20, csumOffset: 16}).encode(b)
		return b
	}
	none := make([]byte, virtioNetHdrLen)
	f.Add(append(none, flowA4.with(2, header.TCPFlagAck, data(0, 1000)).bytes()...))
	f.Add(append(gso(1368), flowA4.with(2, header.TCPFlagAck|header.TCPFlagPsh, data(0, 20000)).bytes()...))
	f.Add(append(gso(1), flowA4.with(2, header.TCPFlagAck, data(0, 3000)).bytes()...))
	f.Add(append(none, flowA4.with(2, header.TCPFlagAck|header.TCPFlagFin, nil).bytes()...))
	f.Add(append(none, flowB4.with(2, header.TCPFlagSyn, nil).bytes()...))
	f.Add(append(none, 0x45, 0, 0))
	g, overlay, _ := fuzzGateway(f)
	mtu := overlay.mtu
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < virtioNetHdrLen || len(in) > GatewayMTU {
			return
		}
		var vh virtioNetHdr
		vh.decode(in)
		pkt := append([]byte(nil), in[virtioNetHdrLen:]...)
		head := pkt[:min(len(pkt), linkHeadSize)]
		deliver, fl := g.inbound(&vh, head, len(pkt), pkt[len(head):])
		if fl != nil {
			require.False(t, deliver)
			g.direct.send(fl, &vh, buffer.MakeWithData(pkt))
		}
		drainOverlay(t, overlay.TUN(), func(p []byte) {
			require.LessOrEqual(t, len(p), mtu)
			seg := parseTCP(t, p)
			require.True(t, seg.csumOK, "TCP checksum")
			require.Equal(t, addrA.Addr(), seg.src.Addr())
		})
	})
}

// FuzzDirectToAgent writes arbitrary batches into the overlay's
// TUNAdapter while a direct flow is open: nothing may panic, and what the
// agent's link gets is a virtio_net_hdr and an IPv4 packet of the flow,
// its lengths matching, its port the agent's, its checksum complete or
// (for a coalesced segment) announced as partial.
func FuzzDirectToAgent(f *testing.F) {
	back := seg{src: flowA4.dst, dst: flowA4.src}
	f.Add(encodeBatch(segList(stream(back, 4, 1200)).bytes()...))
	f.Add(encodeBatch(segList(edit(stream(back, 3, 800), 1, func(s *seg) { s.flags |= header.TCPFlagFin })).bytes()...))
	f.Add(encodeBatch(back.with(5, header.TCPFlagRst, nil).bytes(), flowA4.with(1, header.TCPFlagAck, nil).bytes()))
	f.Add(encodeBatch([]byte{0x45, 0, 0, 20}))
	unreach := append([]byte{3, 1, 0, 0, 0, 0, 0, 0}, flowA4.with(1, header.TCPFlagSyn, nil).bytes()[:28]...)
	f.Add(encodeBatch(ipv4Packet(flowA4.dst.Addr(), addrA.Addr(), uint8(header.ICMPv4ProtocolNumber), unreach)))
	_, overlay, agent := fuzzGateway(f)
	buf := make([]byte, 1<<17)
	f.Fuzz(func(t *testing.T, batch []byte) {
		bufs := decodeBatch(batch)
		n, err := overlay.TUN().Write(bufs, wgOffset)
		require.NoError(t, err)
		require.Equal(t, len(bufs), n)
		for {
			n, err := unix.Read(agent, buf)
			if err == unix.EAGAIN {
				break
			}
			require.NoError(t, err)
			require.Greater(t, n, virtioNetHdrLen)
			var vh virtioNetHdr
			vh.decode(buf)
			p := buf[virtioNetHdrLen:n]
			ip := header.IPv4(p)
			require.True(t, ip.IsValid(len(p)))
			require.Equal(t, len(p), int(ip.TotalLength()))
			require.True(t, ip.IsChecksumValid())
			if ip.Protocol() == uint8(header.ICMPv4ProtocolNumber) {
				q, ok := icmpQuotedTCP(p[ip.HeaderLength():])
				require.True(t, ok, "only ICMP errors about the flow")
				require.Equal(t, flowA4.src.Port(), header.TCP(q[header.IPv4(q).HeaderLength():]).SourcePort())
				continue
			}
			th := header.TCP(p[ip.HeaderLength():])
			require.Equal(t, flowA4.src.Port(), th.DestinationPort())
			if vh.gsoType != virtioNetHdrGSONone {
				require.Equal(t, uint8(virtioNetHdrFNeedsCsum), vh.flags)
				require.Positive(t, vh.gsoSize)
				require.LessOrEqual(t, int(vh.hdrLen), len(p))
			}
		}
		drainOverlay(t, overlay.TUN(), func([]byte) {})
	})
}

// TestDirectGarbage mutates the fuzzers' seeds many times over, so that
// every test run sends malformed packets both ways through a direct
// flow's path (the fuzzers explore beyond).
func TestDirectGarbage(t *testing.T) {
	g, overlay, agent := fuzzGateway(t)
	none := make([]byte, virtioNetHdrLen)
	out := [][]byte{
		append(none, flowA4.with(2, header.TCPFlagAck, data(0, 1000)).bytes()...),
		append(none, flowA4.with(2, header.TCPFlagAck|header.TCPFlagFin, nil).bytes()...),
		append(none, flowB4.with(2, header.TCPFlagSyn, nil).bytes()...),
	}
	back := seg{src: flowA4.dst, dst: flowA4.src}
	in := [][]byte{
		encodeBatch(segList(stream(back, 4, 1200)).bytes()...),
		encodeBatch(back.with(5, header.TCPFlagRst, nil).bytes(), flowA4.with(1, header.TCPFlagAck, nil).bytes()),
	}
	mutate := func(rng *rand.Rand, seeds [][]byte) []byte {
		b := append([]byte(nil), seeds[rng.IntN(len(seeds))]...)
		for range 1 + rng.IntN(4) {
			b[rng.IntN(len(b))] = byte(rng.Uint32())
		}
		return b
	}
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 1<<17)
	for range 20000 {
		b := mutate(rng, out)
		var vh virtioNetHdr
		vh.decode(b)
		pkt := b[virtioNetHdrLen:]
		head := pkt[:min(len(pkt), linkHeadSize)]
		if _, fl := g.inbound(&vh, head, len(pkt), pkt[len(head):]); fl != nil {
			g.direct.send(fl, &vh, buffer.MakeWithData(pkt))
		}
		bufs := decodeBatch(mutate(rng, in))
		_, err := overlay.TUN().Write(bufs, wgOffset)
		require.NoError(t, err)
		for {
			if _, err := unix.Read(agent, buf); err == unix.EAGAIN {
				break
			}
		}
		drainOverlay(t, overlay.TUN(), func(p []byte) {
			require.LessOrEqual(t, len(p), overlay.mtu)
		})
	}
}
