package link

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// udpFrame builds an Ethernet frame holding an IPv4 UDP packet from src
// to dst with one payload byte, seq.
func udpFrame(src, dst netip.AddrPort, seq byte) []byte {
	f := make([]byte, ethLen+20+8+1)
	binary.BigEndian.PutUint16(f[12:], ethIPv4)
	ip := f[ethLen:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	ip[8], ip[9] = 64, protoUDP
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[20:], src.Port())
	binary.BigEndian.PutUint16(ip[22:], dst.Port())
	binary.BigEndian.PutUint16(ip[24:], 9)
	ip[28] = seq
	return f
}

// fateOfA sends flow A's n packets through a lossy pipe, with others
// extra packets of flow B before each of A's, and returns which of A's
// packets arrived.
func fateOfA(t *testing.T, flow func([]byte) uint64, n int, others func(i int) int) []bool {
	t.Helper()
	a := netip.MustParseAddrPort("10.0.0.1:4000")
	b := netip.MustParseAddrPort("10.0.0.2:5000")
	srv := netip.MustParseAddrPort("10.0.0.9:53")
	got := make([]bool, n)
	p, err := New(Config{
		Seed:        42,
		Flow:        flow,
		Impairments: Impairments{Loss: 0.3, Duplicate: 0.05},
		Deliver: func(pkt []byte) {
			if binary.BigEndian.Uint16(pkt[ethLen+20:]) == a.Port() {
				got[pkt[len(pkt)-1]] = true
			}
		},
	})
	require.NoError(t, err)
	defer p.Close()
	for i := range n {
		for range others(i) {
			p.Send(udpFrame(b, srv, 0))
		}
		p.Send(udpFrame(a, srv, byte(i)))
	}
	return got
}

// TestFlowStreamsIndependent: with Flow set, which of a flow's packets
// are lost depends on that flow alone; other traffic interleaved with it,
// in any amount, leaves its fate unchanged. With one stream per pipe the
// same interleaving moves the losses, which is what made two runs' captures
// drift apart once any packet moved.
func TestFlowStreamsIndependent(t *testing.T) {
	const n = 200
	none := func(int) int { return 0 }
	some := func(i int) int { return i % 3 }
	alone := fateOfA(t, EthernetFlow, n, none)
	mixed := fateOfA(t, EthernetFlow, n, some)
	assert.Equal(t, alone, mixed, "flow A's losses changed with other traffic on the link")
	lost := 0
	for _, ok := range alone {
		if !ok {
			lost++
		}
	}
	assert.InDelta(t, 0.3*n, lost, 0.12*n, "loss rate of flow A")

	// One stream for the pipe: the same two runs disagree.
	assert.NotEqual(t, fateOfA(t, nil, n, none), fateOfA(t, nil, n, some))
}

func TestEthernetFlow(t *testing.T) {
	ap := netip.MustParseAddrPort
	base := udpFrame(ap("10.0.0.1:4000"), ap("10.0.0.9:53"), 1)
	assert.Equal(t, EthernetFlow(base), EthernetFlow(udpFrame(ap("10.0.0.1:4000"), ap("10.0.0.9:53"), 2)),
		"the payload is not part of the flow")
	for name, other := range map[string][]byte{
		"source port":   udpFrame(ap("10.0.0.1:4001"), ap("10.0.0.9:53"), 1),
		"dest port":     udpFrame(ap("10.0.0.1:4000"), ap("10.0.0.9:54"), 1),
		"source addr":   udpFrame(ap("10.0.0.2:4000"), ap("10.0.0.9:53"), 1),
		"reverse":       udpFrame(ap("10.0.0.9:53"), ap("10.0.0.1:4000"), 1),
		"not IP":        append(append([]byte{}, base[:12]...), 0x08, 0x06, 0, 1),
		"short":         base[:10],
		"truncated IP":  base[:ethLen+12],
		"no L4 in view": base[:ethLen+20],
	} {
		assert.NotEqual(t, EthernetFlow(base), EthernetFlow(other), name)
	}

	// A later fragment carries no ports: it falls into the flow of the
	// addresses and protocol alone, as does the first piece's header
	// without them.
	frag := udpFrame(ap("10.0.0.1:4000"), ap("10.0.0.9:53"), 1)
	binary.BigEndian.PutUint16(frag[ethLen+6:], 10)
	assert.Equal(t, EthernetFlow(base[:ethLen+20]), EthernetFlow(frag))

	// IPv6: the ports count.
	v6 := func(sport uint16) []byte {
		f := make([]byte, ethLen+40+8)
		binary.BigEndian.PutUint16(f[12:], ethIPv6)
		f[ethLen] = 0x60
		f[ethLen+6] = protoTCP
		f[ethLen+8+15], f[ethLen+24+15] = 1, 2
		binary.BigEndian.PutUint16(f[ethLen+40:], sport)
		return f
	}
	assert.Equal(t, EthernetFlow(v6(1)), EthernetFlow(v6(1)))
	assert.NotEqual(t, EthernetFlow(v6(1)), EthernetFlow(v6(2)))
}

// TestFlowTableBounded: past maxFlows the table starts afresh instead of
// growing.
func TestFlowTableBounded(t *testing.T) {
	p, err := New(Config{Flow: EthernetFlow, Impairments: Impairments{Loss: 0.01}, Deliver: func([]byte) {}})
	require.NoError(t, err)
	defer p.Close()
	dst := netip.MustParseAddrPort("10.0.0.9:53")
	for i := range maxFlows + 10 {
		p.Send(udpFrame(netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(i)), dst, 0))
	}
	p.mu.Lock()
	n := len(p.flows)
	p.mu.Unlock()
	assert.LessOrEqual(t, n, maxFlows)
	assert.Positive(t, n)
}

func FuzzEthernetFlow(f *testing.F) {
	f.Add(udpFrame(netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2"), 0))
	f.Add([]byte{})
	f.Add(make([]byte, ethLen+40))
	f.Fuzz(func(t *testing.T, frame []byte) {
		k := EthernetFlow(frame)
		assert.Equal(t, k, EthernetFlow(frame), "the key depends on the frame alone")
	})
}
