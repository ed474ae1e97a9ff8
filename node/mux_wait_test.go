package node_test

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/node"
)

// transportDatagram is a WireGuard transport message as Classify sees one,
// numbered in its counter field.
func transportDatagram(i int) []byte {
	b := make([]byte, 96)
	b[0] = 4
	binary.LittleEndian.PutUint64(b[8:16], uint64(i))
	return b
}

// stunDatagram is a STUN message as Classify sees one.
func stunDatagram() []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b[0:2], 0x0001) // binding request
	binary.BigEndian.PutUint32(b[4:8], 0x2112a442)
	return b
}

// labPair is two hosts on one lab network, a at .1 and b at .2.
func labPair(t *testing.T) (a, b *fabric.Host) {
	t.Helper()
	f, err := fabric.New(fabric.Config{Seed: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "lan", Prefix: netip.MustParsePrefix("10.9.0.0/24")})
	require.NoError(t, err)
	a, err = f.AddHost(fabric.HostConfig{Name: "a", Interfaces: []fabric.InterfaceConfig{{Network: "lan", Addr: netip.MustParseAddr("10.9.0.1")}}})
	require.NoError(t, err)
	b, err = f.AddHost(fabric.HostConfig{Name: "b", Interfaces: []fabric.InterfaceConfig{{Network: "lan", Addr: netip.MustParseAddr("10.9.0.2")}}})
	require.NoError(t, err)
	return a, b
}

// readAllWireGuard reads WireGuard datagrams from mux until want arrived
// or none came for a second, and returns their counters in order.
// labMux is a mux on a lab host's socket at 10.9.0.1:51820 (to) and a
// peer's socket on the other host of labPair, both closed when t ends.
func labMux(t *testing.T, ctx context.Context) (mux *node.Mux, peer net.PacketConn, to *net.UDPAddr) {
	t.Helper()
	a, b := labPair(t)
	pc, err := a.ListenPacket(ctx, "udp4", "10.9.0.1:51820")
	require.NoError(t, err)
	mux = node.NewMux(pc, nil)
	t.Cleanup(func() { mux.Close() })
	peer, err = b.ListenPacket(ctx, "udp4", "10.9.0.2:51820")
	require.NoError(t, err)
	t.Cleanup(func() { peer.Close() })
	return mux, peer, net.UDPAddrFromAddrPort(netip.MustParseAddrPort("10.9.0.1:51820"))
}

func readAllWireGuard(t *testing.T, mux *node.Mux, want int) []uint64 {
	t.Helper()
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, len(bufs))
	from := make([]netip.AddrPort, len(bufs))
	var got []uint64
	for len(got) < want {
		cancel := make(chan struct{})
		timer := time.AfterFunc(time.Second, func() { close(cancel) })
		n, err := mux.ReadWireGuard(cancel, bufs, sizes, from)
		timer.Stop()
		if err != nil {
			break
		}
		for i := range n {
			got = append(got, binary.LittleEndian.Uint64(bufs[i][8:16]))
		}
	}
	return got
}

// TestMuxWaitsOnLabSocket: on a lab host's socket the mux does not drop
// WireGuard datagrams when the Bind falls behind; it stops reading and
// leaves them in the socket's own receive queue (bounded like SO_RCVBUF),
// so a burst three times the mux's queue arrives whole and in order. At
// 20 ms RTT its dropping cost 5% of a lab transfer's packets.
func TestMuxWaitsOnLabSocket(t *testing.T) {
	mux, peer, to := labMux(t, t.Context())

	const sent = 3 * 1024 // three times the mux's queue; 288 KiB, within the socket's
	for i := range sent {
		_, err := peer.WriteTo(transportDatagram(i), to)
		require.NoError(t, err)
	}
	got := readAllWireGuard(t, mux, sent)
	require.Equal(t, sent, len(got), "every datagram of the burst reached WireGuard")
	for i, c := range got {
		require.Equal(t, uint64(i), c, "in order")
	}
	st := mux.Stats()
	assert.Equal(t, uint64(sent), st.WireGuard)
	assert.Zero(t, st.WireGuardDropped)
}

// TestMuxStopsWaitingWhenNobodyReads: when nothing reads WireGuard (the
// Bind closed), the lab socket's mux waits for room only once, then drops
// WireGuard again, so STUN (ICE's checks and consent) is not stuck behind
// it.
func TestMuxStopsWaitingWhenNobodyReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	mux, peer, to := labMux(t, ctx)

	const sent = 1024 + 100
	for i := range sent {
		_, err := peer.WriteTo(transportDatagram(i), to)
		require.NoError(t, err)
	}
	_, err := peer.WriteTo(stunDatagram(), to)
	require.NoError(t, err)
	start := time.Now()
	stunConn := mux.STUNConn()
	require.NoError(t, stunConn.SetReadDeadline(time.Now().Add(5*time.Second)))
	buf := make([]byte, 2048)
	n, from, err := stunConn.ReadFrom(buf)
	require.NoError(t, err, "STUN behind a WireGuard queue nobody reads")
	assert.Equal(t, stunDatagram(), buf[:n])
	assert.Equal(t, "10.9.0.2:51820", from.String())
	assert.Less(t, time.Since(start), 2*time.Second, "one wait, not one per datagram")
	st := mux.Stats()
	assert.Equal(t, uint64(sent), st.WireGuard)
	assert.Equal(t, uint64(sent-1024), st.WireGuardDropped, "the queue holds 1,024; the rest were dropped")

	// Once WireGuard reads again, the mux waits for room again: a second
	// burst larger than the queue arrives whole.
	got := readAllWireGuard(t, mux, 1024)
	require.Equal(t, 1024, len(got))
	for i := range 2 * 1024 {
		_, err := peer.WriteTo(transportDatagram(i), to)
		require.NoError(t, err)
	}
	got = readAllWireGuard(t, mux, 2*1024)
	require.Equal(t, 2*1024, len(got), "the second burst, whole")
	assert.Equal(t, uint64(sent-1024), mux.Stats().WireGuardDropped, "no drop in the second burst")
}

// TestMuxDropsOnKernelSocket: on a kernel UDP socket the mux keeps
// reading and drops what its queue cannot hold, as before: the kernel's
// socket buffer cannot be told to wait, and STUN must not queue behind
// WireGuard.
func TestMuxDropsOnKernelSocket(t *testing.T) {
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	_ = pc.SetReadBuffer(4 << 20) // capped by net.core.rmem_max; the pacing below does the rest
	mux := node.NewMux(pc, nil)
	defer mux.Close()
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer peer.Close()
	to := pc.LocalAddr().(*net.UDPAddr)
	const sent = 2 * 1024
	for i := range sent {
		_, err := peer.WriteTo(transportDatagram(i), to)
		require.NoError(t, err)
		if i%64 == 63 {
			time.Sleep(time.Millisecond) // paced, so the kernel's buffer rarely fills
		}
	}
	// Wait until the mux has read everything the kernel kept: all of it,
	// or no progress for 200 ms.
	last, still := uint64(0), time.Now()
	for {
		n := mux.Stats().WireGuard
		if n == sent || time.Since(still) > 200*time.Millisecond {
			break
		}
		if n != last {
			last, still = n, time.Now()
		}
		time.Sleep(time.Millisecond)
	}
	st := mux.Stats()
	require.Greater(t, st.WireGuard, uint64(1024), "the mux read more than its queue holds")
	assert.Equal(t, st.WireGuard-1024, st.WireGuardDropped, "and dropped what its queue could not hold")
	assert.Equal(t, 1024, len(readAllWireGuard(t, mux, 1024)))
}
