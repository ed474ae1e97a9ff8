package node

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn"

	"github.com/latticelab/lattice/key"
)

// chanConn is a net.PacketConn whose reads come from a channel, so a test
// decides exactly what the mux reads and from where. Writes vanish.
type chanConn struct {
	in   chan datagramIn
	done chan struct{}
}

type datagramIn struct {
	b    []byte
	from netip.AddrPort
}

func newChanConn() *chanConn {
	return &chanConn{in: make(chan datagramIn, 8), done: make(chan struct{})}
}

func (c *chanConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case d := <-c.in:
		return copy(b, d.b), net.UDPAddrFromAddrPort(d.from), nil
	case <-c.done:
		return 0, nil, net.ErrClosed
	}
}

func (c *chanConn) WriteTo(b []byte, _ net.Addr) (int, error) { return len(b), nil }
func (c *chanConn) Close() error                              { close(c.done); return nil }
func (c *chanConn) LocalAddr() net.Addr {
	return net.UDPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.1:51820"))
}
func (c *chanConn) SetDeadline(time.Time) error      { return nil }
func (c *chanConn) SetReadDeadline(time.Time) error  { return nil }
func (c *chanConn) SetWriteDeadline(time.Time) error { return nil }

// transportTo is a minimal WireGuard transport message for receiver idx,
// its counter field marked so that it can be told apart.
func transportTo(idx uint32, mark byte) []byte {
	pkt := make([]byte, transportMin)
	pkt[0] = 4
	binary.LittleEndian.PutUint32(pkt[4:8], idx)
	pkt[8] = mark
	return pkt
}

// FuzzBindDirect feeds two arbitrary datagrams, each from the peer's
// direct address, from another address or from the peer's previous
// address, through the shared socket into the Bind's direct receive
// path, followed by a transport message from the peer that must get
// through. Nothing panics; only WireGuard messages reach WireGuard, in
// order and unchanged; a packet from the direct address belongs to that
// peer, one from elsewhere only to the peer its receiver index names;
// everything else is counted as unknown, and transport messages from the
// peer for no session of ours as stale.
func FuzzBindDirect(f *testing.F) {
	resp := make([]byte, responseSize)
	resp[0] = 2
	binary.LittleEndian.PutUint32(resp[8:12], 9)
	init := make([]byte, initiationSize)
	init[0] = 1
	cookie := make([]byte, cookieSize)
	cookie[0] = 3
	binary.LittleEndian.PutUint32(cookie[4:8], 7)
	f.Add(transportTo(7, 1), uint8(0), transportTo(9, 2), uint8(1))
	f.Add(transportTo(5, 1), uint8(0), transportTo(5, 2), uint8(1))
	f.Add(resp, uint8(1), init, uint8(2))
	f.Add(cookie, uint8(1), []byte("stun? no"), uint8(0))
	f.Add([]byte{0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(0), []byte{4, 0, 0, 0}, uint8(2))
	f.Fuzz(func(t *testing.T, pkt1 []byte, src1 uint8, pkt2 []byte, src2 uint8) {
		peerAddr := netip.MustParseAddrPort("198.51.100.2:40000")
		oldAddr := netip.MustParseAddrPort("198.51.100.2:39999")
		strange := netip.MustParseAddrPort("203.0.113.66:1234")
		srcs := [...]netip.AddrPort{peerAddr, strange, oldAddr}

		pc := newChanConn()
		mux := NewMux(pc, nil)
		defer mux.Close()
		b := NewBind(mux)
		defer b.Close()
		var pk, qk key.Public
		pk[0], qk[0] = 1, 2
		p, q := b.Peer(pk), b.Peer(qk)
		b.noteIndex(p, 7)
		b.noteIndex(q, 9)
		b.SetDirect(p, oldAddr)
		b.SetDirect(p, peerAddr)
		fns, _, err := b.Open(0)
		if err != nil {
			t.Fatal(err)
		}

		sentinel := transportTo(7, 0xEE)
		sent := []datagramIn{{pkt1, srcs[int(src1)%len(srcs)]}, {pkt2, srcs[int(src2)%len(srcs)]}, {sentinel, peerAddr}}
		var want []datagramIn
		var wantPeer []*Path
		var wantUnknown, wantStale uint64
		for _, d := range sent {
			pc.in <- d
			if Classify(d.b) != KindWireGuard || len(d.b) > muxBufSize {
				continue
			}
			var to *Path
			switch idx, ok := receiverIndex(d.b); {
			case d.from == peerAddr:
				to = p
				if isTransport(d.b) && idx != 7 {
					wantStale++
				}
			case ok && idx == 7:
				to = p
			case ok && idx == 9:
				to = q
			}
			if to == nil {
				wantUnknown++
				continue
			}
			want, wantPeer = append(want, d), append(wantPeer, to)
		}
		// Every datagram read and classified: one receive call gets the
		// whole queue.
		for deadline := time.Now().Add(5 * time.Second); ; {
			st := mux.Stats()
			if st.STUN+st.WireGuard+st.Other+st.STUNDropped+st.WireGuardDropped >= uint64(len(sent)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("mux read %+v of %d datagrams", st, len(sent))
			}
			time.Sleep(time.Millisecond)
		}

		bufs := make([][]byte, conn.IdealBatchSize)
		for i := range bufs {
			bufs[i] = make([]byte, muxBufSize)
		}
		sizes := make([]int, len(bufs))
		eps := make([]conn.Endpoint, len(bufs))
		n, err := fns[0](bufs, sizes, eps)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(want) {
			t.Fatalf("received %d packets, want %d", n, len(want))
		}
		for i := range n {
			if !bytes.Equal(bufs[i][:sizes[i]], want[i].b) {
				t.Fatalf("packet %d is %x, sent %x", i, bufs[i][:sizes[i]], want[i].b)
			}
			ep, ok := eps[i].(*Endpoint)
			if !ok || ep.Path != wantPeer[i] {
				t.Fatalf("packet %d from %v went to %v", i, want[i].from, eps[i])
			}
		}
		if b.Unknown() != wantUnknown {
			t.Fatalf("unknown %d, want %d", b.Unknown(), wantUnknown)
		}
		if b.Stale() != wantStale {
			t.Fatalf("stale %d, want %d", b.Stale(), wantStale)
		}
	})
}
