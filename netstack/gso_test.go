package netstack

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/tun"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

const (
	ack = header.TCPFlagAck
	psh = header.TCPFlagPsh
	fin = header.TCPFlagFin
	cwr = header.TCPFlagCwr
	ece = header.TCPFlagEce
	syn = header.TCPFlagSyn
	rst = header.TCPFlagRst
	urg = header.TCPFlagUrg
)

func TestGSOSplit(t *testing.T) {
	tests := []struct {
		name    string
		seg     seg
		size    int // payload bytes
		mss     int
		wantSeg int
	}{
		{name: "v4 64 KB", seg: flowA4.with(1<<32-5000, ack|psh, nil), size: 65000, mss: 1368, wantSeg: 48},
		{name: "v4 FIN on last only", seg: flowA4.with(7, ack|psh|fin, nil), size: 5000, mss: 1368, wantSeg: 4},
		{name: "v4 CWR on first only", seg: flowA4.with(7, ack|cwr|ece, nil), size: 5000, mss: 1368, wantSeg: 4},
		{name: "v4 exact multiple of MSS", seg: flowA4.with(1, ack, nil), size: 10 * 1368, mss: 1368, wantSeg: 10},
		{name: "v4 odd MSS", seg: flowA4.with(1, ack|psh, nil), size: 9999, mss: 1367, wantSeg: 8},
		{name: "v4 one segment", seg: flowA4.with(1, ack|psh, nil), size: 700, mss: 1368, wantSeg: 1},
		{name: "v4 pure ACK", seg: flowA4.with(1, ack, nil), size: 0, mss: 1368, wantSeg: 1},
		{name: "v4 no options", seg: func() seg { s := flowA4.with(1, ack|psh, nil); s.opts = []byte{}; return s }(), size: 20000, mss: 1380, wantSeg: 15},
		{name: "v6 30 KB", seg: flowA6.with(99, ack|psh, nil), size: 30000, mss: 1348, wantSeg: 23},
		{name: "v6 FIN", seg: flowA6.with(99, ack|fin, nil), size: 3000, mss: 1348, wantSeg: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := newTestAdapter(t)
			s := tt.seg
			s.id = 65530 // wraps while splitting
			s.payload = data(0, tt.size)
			send(t, a, gsoPacket(s, tt.mss))
			out := readAll(t, a, BatchSize, tt.wantSeg)

			var got []byte
			for i, b := range out {
				p := parseTCP(t, b)
				last := i == len(out)-1
				assert.True(t, p.csumOK, "segment %d: TCP checksum", i)
				assert.Equal(t, s.seq+uint32(i*tt.mss), p.seq, "segment %d: sequence number", i)
				assert.Equal(t, s.src, p.src)
				assert.Equal(t, s.dst, p.dst)
				assert.Equal(t, s.ack, p.ack, "segment %d: ACK number", i)
				assert.Equal(t, s.window, p.window)
				assert.True(t, bytes.Equal(s.opts, p.opts), "segment %d: options %x", i, p.opts)
				if !s.v6() {
					assert.Equal(t, s.id+uint16(i), p.id, "segment %d: IP ID", i)
				}
				want := s.flags
				if !last {
					want &^= fin | psh
				}
				if i > 0 {
					want &^= cwr
				}
				assert.Equal(t, want, p.flags, "segment %d: flags", i)
				if !last {
					assert.Len(t, p.payload, tt.mss, "segment %d: payload", i)
				}
				assert.LessOrEqual(t, len(b), DefaultMTU, "segment %d exceeds the MTU", i)
				got = append(got, p.payload...)
			}
			assert.True(t, bytes.Equal(s.payload, got), "payload differs after splitting")
			st := a.Stats()
			assert.EqualValues(t, 1, st.OutPackets)
			assert.EqualValues(t, tt.wantSeg, st.OutSegments)
		})
	}
}

// TestReadResumes reads GSO segments through small batches: a segment
// split across Reads continues where the last Read stopped.
func TestReadResumes(t *testing.T) {
	a, _ := newTestAdapter(t)
	s1 := flowA4.with(1000, ack, data(0, 40000))
	s2 := flowA4.with(1000+40000, ack|psh, data(40000, 30000))
	send(t, a, gsoPacket(s1, 1000), gsoPacket(s2, 1000))
	out := readAll(t, a, 7, 70)
	var got []byte
	for i, b := range out {
		p := parseTCP(t, b)
		require.True(t, p.csumOK, "segment %d", i)
		require.Equal(t, uint32(1000+i*1000), p.seq, "segment %d", i)
		got = append(got, p.payload...)
	}
	assert.Equal(t, data(0, 70000), got)
}

// TestReadLimit checks that one Read returns no more packets than fit in
// one UDP GSO datagram of wireguard-go's (see readLimit).
func TestReadLimit(t *testing.T) {
	tests := []struct {
		mtu, want int
	}{
		{mtu: 1280, want: 49},
		{mtu: 1420, want: 45},
		{mtu: 9000, want: 7},
		{mtu: 65535, want: 1},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, readLimit(tt.mtu, BatchSize), "MTU %d", tt.mtu)
		if tt.want > 1 {
			// A datagram of full messages stays within 64 KiB
			// with its headers.
			assert.LessOrEqual(t, tt.want*(tt.mtu+32)+40+8+14, 1<<16-1, "MTU %d", tt.mtu)
		}
	}

	a, _ := newTestAdapter(t)
	send(t, a, gsoPacket(flowA4.with(1, ack, data(0, 65000)), 1368))
	bufs := make([][]byte, BatchSize)
	for i := range bufs {
		bufs[i] = make([]byte, 1<<16-1)
	}
	n, err := a.Read(bufs, make([]int, BatchSize), wgOffset)
	require.NoError(t, err)
	assert.Equal(t, readLimit(DefaultMTU, BatchSize), n)

	// A smaller batch (Config.Batch, as the lab's nodes ask) caps a Read
	// at it, and the rest of the segment comes in the next Reads.
	small := newTUNAdapterBatch(DefaultMTU, 16)
	small.linkEndpoint().Attach(&recorder{})
	t.Cleanup(func() { _ = small.Close() })
	assert.Equal(t, 16, small.BatchSize())
	send(t, small, gsoPacket(flowA4.with(1, ack, data(0, 65000)), 1368))
	total := 0
	for total < 48 {
		n, err := small.Read(bufs, make([]int, BatchSize), wgOffset)
		require.NoError(t, err)
		assert.LessOrEqual(t, n, 16)
		total += n
	}
	assert.Equal(t, 48, total, "65000 bytes in 1368-byte packets")
}

// rawPacket is a packet gVisor sends without GSO, e.g. UDP.
func rawPacket(b []byte) *stack.PacketBuffer {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 64, Payload: buffer.MakeWithData(b[20:])})
	copy(pkt.NetworkHeader().Push(20), b[:20])
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	return pkt
}

func TestReadCopiesPlainPackets(t *testing.T) {
	a, _ := newTestAdapter(t)
	small := flowA4.with(5, ack, data(0, 300)).bytes()
	send(t, a, rawPacket(small))
	out := readAll(t, a, 4, 1)
	assert.Equal(t, small, out[0])
}

func TestReadDropsWhatDoesNotFit(t *testing.T) {
	a, _ := newTestAdapter(t)
	big := flowA4.with(5, ack, data(0, 3000)).bytes()
	small := flowA4.with(5, ack, data(0, 300)).bytes()
	send(t, a, rawPacket(big), rawPacket(small))
	bufs := [][]byte{make([]byte, 2048)}
	sizes := []int{0}
	n, err := a.Read(bufs, sizes, wgOffset)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, small, bufs[0][wgOffset:wgOffset+sizes[0]])
	assert.EqualValues(t, 1, a.Stats().OutDropped)
}

func TestOutQueueBound(t *testing.T) {
	a, _ := newTestAdapter(t)
	b := flowA4.with(5, ack, nil).bytes()
	var l stack.PacketBufferList
	for range outQueueLen + 10 {
		l.PushBack(rawPacket(b))
	}
	n, err := a.linkEndpoint().WritePackets(l)
	require.Nil(t, err)
	l.DecRef()
	assert.Equal(t, outQueueLen, n)
	st := a.Stats()
	assert.EqualValues(t, outQueueLen, st.OutPackets)
	assert.EqualValues(t, 10, st.OutDropped)
}

func TestAdapterClose(t *testing.T) {
	a := newTUNAdapter(DefaultMTU)
	a.linkEndpoint().Attach(&recorder{})
	assert.Equal(t, tun.Event(tun.EventUp), <-a.Events())
	assert.Equal(t, BatchSize, a.BatchSize())
	mtu, err := a.MTU()
	require.NoError(t, err)
	assert.Equal(t, DefaultMTU, mtu)
	name, err := a.Name()
	require.NoError(t, err)
	assert.Equal(t, InterfaceName, name)
	assert.Nil(t, a.File())

	// Queued packets are released at Close.
	send(t, a, gsoPacket(flowA4.with(1, ack, data(0, 9000)), 1000))

	read := make(chan error, 1)
	go func() {
		bufs := [][]byte{make([]byte, 1<<16-1)}
		for {
			if _, err := a.Read(bufs, []int{0}, wgOffset); err != nil {
				read <- err
				return
			}
		}
	}()
	select {
	case err := <-read:
		t.Fatalf("Read returned before Close: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "second Close")
	select {
	case err := <-read:
		assert.True(t, errors.Is(err, os.ErrClosed), "Read after Close: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Read")
	}
	_, ok := <-a.Events()
	assert.False(t, ok, "events channel still open")

	_, err = a.Write([][]byte{flowA4.with(1, ack, nil).bytes()}, 0)
	assert.True(t, errors.Is(err, os.ErrClosed), "Write after Close: %v", err)
	var l stack.PacketBufferList
	l.PushBack(rawPacket(flowA4.with(1, ack, nil).bytes()))
	n, terr := a.linkEndpoint().WritePackets(l)
	l.DecRef()
	assert.Zero(t, n)
	assert.IsType(t, &tcpip.ErrClosedForSend{}, terr)
}
