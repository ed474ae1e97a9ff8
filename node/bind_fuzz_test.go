package node

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/latticelab/lattice/key"
)

type nopRelay struct{}

func (nopRelay) Send(key.Public, []byte) error { return nil }

// FuzzBindRelayed feeds arbitrary packets from a known peer into the
// Bind's relayed entry point, which classifies them, checks them against
// the peer's sessions and queues WireGuard messages: nothing panics,
// only WireGuard messages are queued, and only transport messages with
// an index not ours count as stale.
func FuzzBindRelayed(f *testing.F) {
	resp := make([]byte, 92)
	resp[0] = 2
	data := make([]byte, 64)
	data[0] = 4
	binary.LittleEndian.PutUint32(data[4:8], 7)
	f.Add(resp)
	f.Add(data)
	f.Add(make([]byte, 148))
	f.Add([]byte{4, 0, 0, 0})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		b := NewBind(nil)
		var peer key.Public
		p := b.Peer(peer)
		b.SetRelay(nopRelay{})
		b.noteIndex(p, 7)
		stale := 0
		p.SetStaleHandler(func() { stale++ })
		b.DeliverRelayed(peer, pkt)
		isWG := Classify(pkt) == KindWireGuard && len(pkt) <= muxBufSize
		select {
		case r := <-b.relayIn:
			if !isWG {
				t.Fatalf("queued a %d-byte non-WireGuard packet", len(pkt))
			}
			muxPool.Put(r.buf)
		default:
			if drop, _ := p.crossing(pkt, time.Now().UnixNano()); isWG && !drop {
				t.Fatal("a WireGuard message was not queued")
			}
		}
		idx, ok := receiverIndex(pkt)
		wantStale := isWG && pkt[0] == 4 && !(ok && idx == 7)
		if got := b.Stale() == 1; got != wantStale {
			t.Fatalf("stale %v, want %v (%d bytes, type %d)", got, wantStale, len(pkt), pkt[0])
		}
		if stale != int(b.Stale()) {
			t.Fatalf("handler ran %d times for %d stale messages", stale, b.Stale())
		}
	})
}
