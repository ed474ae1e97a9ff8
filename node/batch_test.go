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
	for _, wrapped := range []bool{false, true} {
		t.Run(fmt.Sprintf("wrapped=%v", wrapped), func(t *testing.T) {
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
			rx := NewMux(listenUDP(t), nil)
			t.Cleanup(func() { rx.Close() })
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
		})
	}
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
