package netstack

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// encodeBatch frames packets as FuzzWrite decodes them.
func encodeBatch(pkts ...[]byte) []byte {
	var out []byte
	for _, p := range pkts {
		out = binary.BigEndian.AppendUint16(out, uint16(len(p)))
		out = append(out, p...)
	}
	return out
}

// decodeBatch splits fuzz input into packets as encodeBatch framed them,
// each at wgOffset in its buffer.
func decodeBatch(batch []byte) [][]byte {
	var bufs [][]byte
	for len(batch) >= 2 && len(bufs) < BatchSize {
		n := min(int(binary.BigEndian.Uint16(batch)), len(batch)-2)
		bufs = append(bufs, append(make([]byte, wgOffset), batch[2:2+n]...))
		batch = batch[2+n:]
	}
	return bufs
}

func writeSeeds() [][]byte {
	segs := stream(flowA4, 4, 600)
	raw := segList(segs).bytes()
	return [][]byte{
		encodeBatch(raw...),
		encodeBatch(segList(stream(flowA6, 3, 500)).bytes()...),
		encodeBatch(segList(edit(segs, 1, func(s *seg) { s.flags |= syn | fin })).bytes()...),
		encodeBatch(raw[0][:24], raw[1][:40], []byte{0x45}, []byte{0x60, 0, 0, 0}),
		{},
	}
}

// FuzzWrite writes arbitrary packet batches into the adapter: nothing may
// panic, and every packet that reaches gVisor is an IP packet whose length
// fields match its size.
func FuzzWrite(f *testing.F) {
	for _, s := range writeSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, batch []byte) {
		a, r := newTestAdapter(t)
		bufs := decodeBatch(batch)
		n, err := a.Write(bufs, wgOffset)
		require.NoError(t, err)
		require.Equal(t, len(bufs), n)
		got := r.take()
		require.EqualValues(t, len(got), a.Stats().InDelivered)
		for _, p := range got {
			switch p[0] >> 4 {
			case 4:
				require.GreaterOrEqual(t, len(p), header.IPv4MinimumSize)
				require.Equal(t, len(p), int(header.IPv4(p).TotalLength()))
			case 6:
				require.GreaterOrEqual(t, len(p), header.IPv6MinimumSize)
				require.Equal(t, len(p), header.IPv6MinimumSize+int(header.IPv6(p).PayloadLength()))
			default:
				t.Fatalf("delivered a packet of IP version %d", p[0]>>4)
			}
		}
	})
}

// TestWriteGarbageIntoStack writes mutated batches into a real Stack, so
// that gVisor parses whatever the adapter makes of them. (FuzzWrite
// delivers to a recorder instead, to check what the adapter hands on.)
func TestWriteGarbageIntoStack(t *testing.T) {
	// gVisor logs malformed packets (rate limited); keep test output clean.
	prev := log.Log().Level
	log.SetLevel(log.Warning)
	t.Cleanup(func() { log.SetLevel(prev) })
	s := newStack(t, addrB)
	rng := rand.New(rand.NewPCG(1, 2))
	seeds := writeSeeds()
	for range 20000 {
		batch := append([]byte(nil), seeds[rng.IntN(len(seeds)-1)]...)
		for range 1 + rng.IntN(8) {
			batch[rng.IntN(len(batch))] = byte(rng.Uint32())
		}
		bufs := decodeBatch(batch)
		n, err := s.TUN().Write(bufs, wgOffset)
		require.NoError(t, err)
		require.Equal(t, len(bufs), n)
	}
}

// bytes of several segments.
type segList []seg

func (l segList) bytes() [][]byte {
	out := make([][]byte, len(l))
	for i, s := range l {
		out[i] = s.bytes()
	}
	return out
}

// FuzzGRO writes batches of TCP segments built from the input (several
// flows, in and out of order, with assorted flags, options and corrupt
// checksums) and checks what reaches gVisor: for every flow, the delivered
// packets hold exactly the written payload, in order, each starting at the
// sequence number of its first segment; a packet's checksum verifies when
// those of all its segments did, and fails when one of them failed (errors
// in several may cancel out, as they may within one packet); a coalesced
// packet carries no flags but ACK and PSH.
func FuzzGRO(f *testing.F) {
	f.Add([]byte{0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 4, 0, 4, 0})
	f.Add([]byte{0, 0, 5, 120, 1, 0, 5, 120, 0, 0, 5, 120, 2, 0, 3, 0, 1, 0, 5, 120, 0, 0, 2, 0})
	f.Add([]byte{0, 0, 4, 0, 16, 0, 4, 0, 0, 0, 4, 0, 8, 7, 4, 0, 0, 230, 4, 0, 128, 0, 0, 0, 32, 0, 4, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		flows := []seg{flowA4, flowB4, flowA6}
		next := []uint32{1000, 5000, 9000}
		others := []header.TCPFlags{fin, syn, rst, urg, ece, cwr}
		var segs []seg
		var flowOf []int
		for ; len(in) >= 4 && len(segs) < BatchSize; in = in[4:] {
			op, jump, size := in[0], in[1], int(binary.BigEndian.Uint16(in[2:]))%1500
			fl := int(op&3) % len(flows)
			s := flows[fl].with(next[fl], ack, data(int(next[fl]), size))
			if op&4 != 0 {
				s.flags |= psh
			}
			if op&8 != 0 {
				s.flags |= others[int(jump)%len(others)]
			}
			if op&16 != 0 {
				s.badCsum = true
			}
			if op&32 != 0 {
				s.opts = []byte{1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 9}
			}
			if op&64 != 0 {
				s.ttl = 3
			}
			if op&128 != 0 {
				s.payload = nil
			}
			if jump >= 224 { // out of order or a retransmission
				s.seq -= uint32(jump-224) * 100
				s.payload = data(int(s.seq), len(s.payload))
			}
			next[fl] = s.seq + uint32(len(s.payload))
			segs = append(segs, s)
			flowOf = append(flowOf, fl)
		}

		a, r := newTestAdapter(t)
		if len(segs) > 0 {
			writeSegs(t, a, segs...)
		}
		got := r.take()
		require.EqualValues(t, len(got), a.Stats().InDelivered)
		require.EqualValues(t, len(segs)-len(got), a.Stats().InCoalesced)

		// Walk each flow's segments alongside its delivered packets.
		pos := make([]int, len(flows)) // next segment of each flow
		nextOf := func(fl int) int {
			for i := pos[fl]; i < len(segs); i++ {
				if flowOf[i] == fl {
					return i
				}
			}
			return -1
		}
		for k, b := range got {
			p := parseTCP(t, b)
			fl := -1
			for i, f := range flows {
				if f.src == p.src && f.dst == p.dst {
					fl = i
				}
			}
			require.GreaterOrEqual(t, fl, 0, "packet %d of an unknown flow", k)
			first := nextOf(fl)
			require.GreaterOrEqual(t, first, 0, "packet %d: more packets than segments in flow %d", k, fl)
			require.Equal(t, segs[first].seq, p.seq, "packet %d: sequence number", k)
			var payload []byte
			bad, members := 0, 0
			flags := header.TCPFlags(0)
			for i := first; i >= 0 && len(payload) < len(p.payload); i = nextOf(fl) {
				payload = append(payload, segs[i].payload...)
				if segs[i].badCsum {
					bad++
				}
				flags |= segs[i].flags
				members++
				pos[fl] = i + 1
			}
			if members == 0 { // a segment without payload
				flags = segs[first].flags
				if segs[first].badCsum {
					bad++
				}
				pos[fl] = first + 1
			}
			require.True(t, bytes.Equal(payload, p.payload), "packet %d: payload is not that of its segments", k)
			if bad < 2 {
				require.Equal(t, bad == 0, p.csumOK, "packet %d: checksum validity with %d bad segments", k, bad)
			}
			require.Equal(t, flags, p.flags, "packet %d: flags", k)
			if members > 1 {
				require.Zero(t, p.flags&^(ack|psh), "packet %d: coalesced with flags %v", k, p.flags)
			}
			require.LessOrEqual(t, len(b), groMaxSize)
		}
		for fl := range flows {
			require.Equal(t, -1, nextOf(fl), "flow %d: segments were not delivered", fl)
		}
	})
}
