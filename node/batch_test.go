package node

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wgPackets returns transport messages of the given sizes, each filled
// with its index so that order and boundaries can be checked.
func wgPackets(sizes ...int) [][]byte {
	out := make([][]byte, len(sizes))
	for i, n := range sizes {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i + 1)
		}
		b[0], b[1], b[2], b[3] = 4, 0, 0, 0
		out[i] = b
	}
	return out
}

func repeat(n, size int, tail ...int) []int {
	out := make([]int, 0, n+len(tail))
	for range n {
		out = append(out, size)
	}
	return append(out, tail...)
}

func TestSplitRuns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int
		gso   bool
		want  []int // datagrams per message
	}{
		{"one", []int{1452}, true, []int{1}},
		{"equal", repeat(10, 1452), true, []int{10}},
		{"short last", repeat(10, 1452, 100), true, []int{11}},
		{"short in the middle ends the run", []int{1452, 1452, 100, 1452, 1452}, true, []int{3, 2}},
		{"longer after shorter starts a run", []int{100, 1452, 1452}, true, []int{1, 2}},
		{"segment limit", repeat(70, 100), true, []int{64, 6}},
		{"byte limit", repeat(50, 1452), true, []int{45, 5}},
		{"no gso", repeat(3, 1452), false, []int{1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s sendScratch
			msgs := s.split(wgPackets(tc.sizes...), &net.UDPAddr{}, tc.gso)
			var got []int
			for _, m := range msgs {
				got = append(got, len(m.Buffers))
				assert.Equal(t, len(m.Buffers) > 1, m.OOB != nil, "control message only on a run")
				total := 0
				for _, b := range m.Buffers {
					total += len(b)
				}
				assert.LessOrEqual(t, total, gsoMaxBytes)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestMuxWriteBatch sends batches through a mux on a real UDP socket (GSO
// and sendmmsg) and on a socket that is not a *net.UDPConn (one send per
// datagram), to a mux on a real socket (recvmmsg), and checks that every
// datagram arrives whole, in order.
func TestMuxWriteBatch(t *testing.T) {
	for _, tc := range []struct{ wrapped, gro bool }{{false, true}, {true, true}, {false, false}} {
		wrapped := tc.wrapped
		t.Run(fmt.Sprintf("wrapped=%v,gro=%v", wrapped, tc.gro), func(t *testing.T) {
			var pc net.PacketConn = listenUDP(t)
			if wrapped {
				pc = plainConn{pc}
			}
			tx := NewMux(pc, nil)
			t.Cleanup(func() { tx.Close() })
			require.Equal(t, !wrapped, tx.batch != nil)
			if !wrapped {
				assert.True(t, tx.batch.gso.Load(), "the kernel here supports UDP GSO")
			}
			rx := newMux(listenUDP(t), nil, tc.gro)
			t.Cleanup(func() { rx.Close() })
			require.Equal(t, tc.gro, rx.batch.gro, "GRO as asked: the kernel here supports it")
			to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
			for _, sizes := range [][]int{
				repeat(40, 1452, 300), {1452, 100, 1452, 1452}, repeat(100, 200), {32},
			} {
				sent := wgPackets(sizes...)
				require.NoError(t, tx.WriteBatch(sent, to))
				got := readN(t, rx, len(sent))
				require.Len(t, got, len(sent))
				for i := range sent {
					assert.Equal(t, sent[i], got[i], "datagram %d of %d", i, len(sent))
				}
			}
			if !wrapped {
				assert.True(t, tx.batch.gso.Load(), "GSO still on after the sends")
			}
			if !wrapped && tc.gro {
				// On loopback a GSO send reaches a GRO socket whole.
				assert.NotZero(t, rx.coalesced.Load(), "runs read as one message and split")
			} else {
				assert.Zero(t, rx.coalesced.Load(), "no runs: one datagram per send, or GRO off")
			}
		})
	}
}

func TestSplitGRO(t *testing.T) {
	msg := []byte("aaabbbccc" + "dd")
	for _, tc := range []struct {
		name string
		b    []byte
		seg  int
		want []string
	}{
		{"no segment size: one datagram", msg, 0, []string{"aaabbbcccdd"}},
		{"equal runs, short last", msg, 3, []string{"aaa", "bbb", "ccc", "dd"}},
		{"segment as long as the message", msg, len(msg), []string{"aaabbbcccdd"}},
		{"segment longer than the message", msg, 100, []string{"aaabbbcccdd"}},
		{"empty", nil, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			splitGRO(tc.b, tc.seg, func(b []byte) { got = append(got, string(b)) })
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestGROSegment(t *testing.T) {
	assert.Zero(t, groSegment(nil), "no control message")
	assert.Zero(t, groSegment([]byte{1, 2, 3}), "a truncated one")
}

func listenUDP(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	require.NoError(t, c.SetReadBuffer(4<<20))
	return c
}

// plainConn hides the *net.UDPConn, as a lab host's socket is not one.
type plainConn struct{ net.PacketConn }

func readN(t *testing.T, m *Mux, n int) [][]byte {
	t.Helper()
	var out [][]byte
	cancel := make(chan struct{})
	timer := time.AfterFunc(5*time.Second, func() { close(cancel) })
	defer timer.Stop()
	bufs := make([][]byte, 16)
	for i := range bufs {
		bufs[i] = make([]byte, muxBufSize)
	}
	sizes, from := make([]int, len(bufs)), make([]netip.AddrPort, len(bufs))
	for len(out) < n {
		k, err := m.ReadWireGuard(cancel, bufs, sizes, from)
		if err != nil {
			return out
		}
		for i := range k {
			out = append(out, append([]byte(nil), bufs[i][:sizes[i]]...))
		}
	}
	return out
}

// TestMuxDualStackSocket runs the mux on a real dual-stack socket ("udp"
// on [::], as the node opens it): batches go out to an IPv4 and an IPv6
// peer (sendmmsg with GSO through the ipv6 side), and what arrives from
// IPv4 is reported as plain IPv4, not ::ffff:127.0.0.1.
func TestMuxDualStackSocket(t *testing.T) {
	dual, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv6unspecified})
	require.NoError(t, err)
	require.NoError(t, dual.SetReadBuffer(4<<20))
	m := NewMux(dual, nil)
	t.Cleanup(func() { m.Close() })
	require.NotNil(t, m.batch, "a dual-stack *net.UDPConn is batched too")
	assert.True(t, m.batch.gso.Load(), "the kernel here supports UDP GSO")
	port := dual.LocalAddr().(*net.UDPAddr).Port

	rx4 := NewMux(listenUDP(t), nil)
	t.Cleanup(func() { rx4.Close() })
	c6, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	require.NoError(t, err)
	rx6 := NewMux(c6, nil)
	t.Cleanup(func() { rx6.Close() })
	for _, rx := range []*Mux{rx4, rx6} {
		to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
		sent := wgPackets(repeat(20, 1452, 300)...)
		require.NoError(t, m.WriteBatch(sent, to), "to %v", to)
		got := readN(t, rx, len(sent))
		require.Len(t, got, len(sent), "to %v", to)
		for i := range sent {
			assert.Equal(t, sent[i], got[i], "datagram %d to %v", i, to)
		}
	}

	// Back from the IPv4 peer: the source the mux reports is unmapped.
	require.NoError(t, rx4.WriteTo(wgPackets(64)[0], netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))))
	cancel := make(chan struct{})
	timer := time.AfterFunc(5*time.Second, func() { close(cancel) })
	defer timer.Stop()
	bufs, sizes, from := [][]byte{make([]byte, muxBufSize)}, make([]int, 1), make([]netip.AddrPort, 1)
	n, err := m.ReadWireGuard(cancel, bufs, sizes, from)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, rx4.LocalAddr().(*net.UDPAddr).AddrPort(), from[0])
	assert.True(t, from[0].Addr().Is4(), "from %v", from[0])
}
