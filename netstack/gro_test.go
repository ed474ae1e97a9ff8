package netstack

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/latticelab/lattice/netx/gvnet"
)

// stream returns n consecutive segments of flow f carrying size bytes
// each, from sequence number 1000 on.
func stream(f seg, n, size int) []seg {
	out := make([]seg, n)
	for i := range out {
		out[i] = f.with(uint32(1000+i*size), ack, data(i*size, size))
	}
	return out
}

// edit returns segs with segs[i] changed by fn.
func edit(segs []seg, i int, fn func(*seg)) []seg {
	segs = append([]seg(nil), segs...)
	fn(&segs[i])
	return segs
}

func TestGRO(t *testing.T) {
	tests := []struct {
		name string
		in   []seg
		// want lists the delivered packets by the inputs they hold.
		want [][]int
		// linux is want under Linux's rules (a batch for a kernel
		// link), where it differs.
		linux [][]int
		// badCsum marks delivered packets whose checksum must fail.
		badCsum map[int]bool
	}{
		{name: "in order", in: stream(flowA4, 4, 1000), want: [][]int{{0, 1, 2, 3}}},
		{name: "IPv6 in order", in: stream(flowA6, 5, 1200), want: [][]int{{0, 1, 2, 3, 4}}},
		{name: "odd sizes", in: stream(flowA4, 3, 999), want: [][]int{{0, 1, 2}}},
		{name: "PSH joins", in: edit(stream(flowA4, 4, 1000), 2, func(s *seg) { s.flags |= psh }), want: [][]int{{0, 1, 2, 3}}, linux: [][]int{{0, 1, 2}, {3}}},
		{name: "PSH first", in: edit(stream(flowA4, 3, 1000), 0, func(s *seg) { s.flags |= psh }), want: [][]int{{0, 1, 2}}, linux: [][]int{{0}, {1, 2}}},
		{
			name: "gVisor's runt", // the tail of one GSO packet, a 62-byte one, the next
			in: func() []seg {
				segs := sized(flowA4, 1368, 1178, 62, 1368, 1368)
				segs[1].flags |= psh
				segs[2].flags |= psh
				return segs
			}(),
			want:  [][]int{{0, 1, 2, 3, 4}},
			linux: [][]int{{0, 1}, {2}, {3, 4}},
		},
		{name: "gap", in: []seg{stream(flowA4, 3, 1000)[0], stream(flowA4, 3, 1000)[2]}, want: [][]int{{0}, {1}}},
		{name: "out of order", in: []seg{stream(flowA4, 2, 1000)[1], stream(flowA4, 2, 1000)[0]}, want: [][]int{{0}, {1}}},
		{name: "duplicate", in: []seg{stream(flowA4, 1, 1000)[0], stream(flowA4, 1, 1000)[0]}, want: [][]int{{0}, {1}}},
		{
			name: "interleaved flows",
			in:   []seg{stream(flowA4, 3, 1000)[0], stream(flowB4, 2, 1000)[0], stream(flowA4, 3, 1000)[1], stream(flowB4, 2, 1000)[1], stream(flowA4, 3, 1000)[2]},
			want: [][]int{{0, 2, 4}, {1, 3}},
		},
		{name: "short segment", in: sized(flowA4, 1000, 500, 1000), want: [][]int{{0, 1, 2}}, linux: [][]int{{0, 1}, {2}}},
		{name: "longer than first", in: sized(flowA4, 500, 1000), want: [][]int{{0, 1}}, linux: [][]int{{0}, {1}}},
		{name: "odd sizes mixed", in: sized(flowA4, 999, 1, 1368, 7, 1000), want: [][]int{{0, 1, 2, 3, 4}}, linux: [][]int{{0, 1}, {2, 3}, {4}}},
		{name: "FIN", in: edit(stream(flowA4, 3, 1000), 1, func(s *seg) { s.flags |= fin }), want: [][]int{{0}, {1}, {2}}},
		{name: "SYN", in: edit(stream(flowA4, 3, 1000), 1, func(s *seg) { s.flags |= syn }), want: [][]int{{0}, {1}, {2}}},
		{name: "RST", in: edit(stream(flowA4, 3, 1000), 1, func(s *seg) { s.flags |= rst }), want: [][]int{{0}, {1}, {2}}},
		{name: "URG", in: edit(stream(flowA4, 3, 1000), 1, func(s *seg) { s.flags |= urg }), want: [][]int{{0}, {1}, {2}}},
		{name: "ECE", in: edit(stream(flowA4, 3, 1000), 1, func(s *seg) { s.flags |= ece }), want: [][]int{{0}, {1}, {2}}},
		{name: "CWR", in: edit(stream(flowA4, 3, 1000), 1, func(s *seg) { s.flags |= cwr }), want: [][]int{{0}, {1}, {2}}},
		{name: "no ACK", in: edit(stream(flowA4, 2, 1000), 1, func(s *seg) { s.flags = psh }), want: [][]int{{0}, {1}}},
		{
			name: "pure ACK ends item",
			in:   []seg{stream(flowA4, 2, 1000)[0], flowA4.with(2000, ack, nil), stream(flowA4, 2, 1000)[1]},
			want: [][]int{{0}, {1}, {2}},
		},
		{name: "options differ", in: edit(stream(flowA4, 2, 1000), 1, func(s *seg) { s.opts = []byte{1, 1, 8, 10, 0, 0, 0, 2, 0, 0, 0, 2} }), want: [][]int{{0}, {1}}},
		{name: "options length differs", in: edit(stream(flowA4, 2, 1000), 1, func(s *seg) { s.opts = []byte{} }), want: [][]int{{0}, {1}}},
		{name: "ACK number differs", in: edit(stream(flowA4, 2, 1000), 1, func(s *seg) { s.ack++ }), want: [][]int{{0}, {1}}},
		{name: "window differs", in: edit(stream(flowA4, 2, 1000), 1, func(s *seg) { s.window++ }), want: [][]int{{0}, {1}}},
		{name: "TTL differs", in: edit(stream(flowA4, 2, 1000), 1, func(s *seg) { s.ttl++ }), want: [][]int{{0}, {1}}},
		{name: "TOS differs", in: edit(stream(flowA4, 2, 1000), 1, func(s *seg) { s.tos = 4 }), want: [][]int{{0}, {1}}},
		{name: "IPv6 hop limit differs", in: edit(stream(flowA6, 2, 1000), 1, func(s *seg) { s.ttl++ }), want: [][]int{{0}, {1}}},
		{name: "IPv6 traffic class differs", in: edit(stream(flowA6, 2, 1000), 1, func(s *seg) { s.tos = 4 }), want: [][]int{{0}, {1}}},
		{name: "IPv4 options", in: func() []seg {
			segs := stream(flowA4, 2, 1000)
			for i := range segs {
				segs[i].ipOpts = []byte{1, 1, 1, 0} // NOP NOP NOP EOL
			}
			return segs
		}(), want: [][]int{{0}, {1}}},
		{name: "64 KB cap", in: stream(flowA4, 50, 1368), want: [][]int{
			{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46},
			{47, 48, 49},
		}},
		{name: "bad checksum stays bad", in: edit(stream(flowA4, 3, 1000), 1, func(s *seg) { s.badCsum = true }), want: [][]int{{0, 1, 2}}, badCsum: map[int]bool{0: true}},
		{name: "bad checksum alone", in: edit(stream(flowA4, 1, 1000), 0, func(s *seg) { s.badCsum = true }), want: [][]int{{0}}, badCsum: map[int]bool{0: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, r := newTestAdapter(t)
			writeSegs(t, a, tt.in...)
			got := r.take()
			require.Len(t, got, len(tt.want), "delivered packets")
			for k, group := range tt.want {
				if len(group) == 1 {
					assert.Equal(t, tt.in[group[0]].bytes(), got[k], "packet %d was changed", k)
					continue
				}
				p := parseTCP(t, got[k])
				first := tt.in[group[0]]
				var payload []byte
				flags := first.flags
				for _, i := range group {
					payload = append(payload, tt.in[i].payload...)
					flags |= tt.in[i].flags & psh
				}
				assert.Equal(t, first.seq, p.seq, "packet %d: sequence number", k)
				assert.Equal(t, flags, p.flags, "packet %d: flags", k)
				assert.Equal(t, first.ack, p.ack, "packet %d: ACK number", k)
				assert.True(t, bytes.Equal(first.opts, p.opts), "packet %d: options", k)
				assert.True(t, bytes.Equal(payload, p.payload), "packet %d: payload", k)
				assert.Equal(t, !tt.badCsum[k], p.csumOK, "packet %d: checksum valid", k)
			}
			st := a.Stats()
			assert.EqualValues(t, len(tt.in), st.InPackets)
			assert.EqualValues(t, len(tt.want), st.InDelivered)
			assert.EqualValues(t, len(tt.in)-len(tt.want), st.InCoalesced)

			linux := tt.linux
			if linux == nil {
				linux = tt.want
			}
			b := newGROBatch(false)
			for _, s := range tt.in {
				p, proto := ipPacket(s.bytes())
				require.NotNil(t, p)
				b.add(p, proto)
			}
			assert.Equal(t, linux, groups(b), "under Linux's rules")
		})
	}
}

// sized returns consecutive segments of flow f with the given payload
// sizes, from sequence number 1000 on.
func sized(f seg, sizes ...int) []seg {
	out := make([]seg, len(sizes))
	off := 0
	for i, n := range sizes {
		out[i] = f.with(uint32(1000+off), ack, data(off, n))
		off += n
	}
	return out
}

// groups lists b's deliveries by the arrival indexes they hold.
func groups(b *groBatch) [][]int {
	var out [][]int
	for _, i := range b.entries {
		g := []int{int(i)}
		if it := b.meta[i].item; it >= 0 {
			g = g[:0]
			for j := b.items[it].head; j >= 0; j = b.meta[j].next {
				g = append(g, int(j))
			}
		}
		out = append(out, g)
	}
	return out
}

// TestGROOtherPackets checks that what is not TCP, or not IP, passes
// through or is dropped, without disturbing coalescing around it.
func TestGROOtherPackets(t *testing.T) {
	a, r := newTestAdapter(t)
	segs := stream(flowA4, 2, 1000)
	udp := make([]byte, 28+100)
	ip := header.IPv4(udp)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(udp)), TTL: 64, Protocol: uint8(header.UDPProtocolNumber),
		SrcAddr: gvnet.ToTCPIP(flowA4.src.Addr()), DstAddr: gvnet.ToTCPIP(flowA4.dst.Addr())})
	ip.SetChecksum(^ip.CalculateChecksum())
	fragment := segs[1].bytes()
	header.IPv4(fragment).SetFlagsFragmentOffset(header.IPv4FlagMoreFragments, 0)
	bufs := [][]byte{
		append(make([]byte, wgOffset), segs[0].bytes()...),
		append(make([]byte, wgOffset), udp...),
		append(make([]byte, wgOffset), []byte{0x50, 1, 2, 3}...),         // not IP
		append(make([]byte, wgOffset), segs[1].bytes()[:30]...),          // truncated
		make([]byte, wgOffset-1),                                         // shorter than the offset
		append(make([]byte, wgOffset), append(segs[1].bytes(), 0, 0)...), // trailing bytes are trimmed
		append(make([]byte, wgOffset), fragment...),
	}
	n, err := a.Write(bufs, wgOffset)
	require.NoError(t, err)
	assert.Equal(t, len(bufs), n)
	got := r.take()
	require.Len(t, got, 3)
	p := parseTCP(t, got[0])
	assert.Equal(t, append(data(0, 1000), data(1000, 1000)...), p.payload, "segment after UDP not coalesced")
	assert.True(t, p.csumOK)
	assert.Equal(t, udp, got[1])
	assert.Equal(t, fragment, got[2])
	st := a.Stats()
	assert.EqualValues(t, 3, st.InDropped)
	assert.EqualValues(t, 1, st.InCoalesced)
}

// TestWriteWithoutStack checks that packets written before gVisor attached
// are dropped.
func TestWriteWithoutStack(t *testing.T) {
	a := newTUNAdapter(DefaultMTU)
	defer a.Close()
	writeSegs(t, a, stream(flowA4, 3, 1000)...)
	assert.Zero(t, a.Stats().InDelivered)
}
