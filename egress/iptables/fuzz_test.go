package iptables

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/policy"
)

// nflogMessage builds one NFLOG packet message with prefix and payload.
func nflogMessage(prefix string, payload []byte) []byte {
	attr := func(typ uint16, v []byte) []byte {
		b := make([]byte, align4(4+len(v)))
		binary.NativeEndian.PutUint16(b, uint16(4+len(v)))
		binary.NativeEndian.PutUint16(b[2:], typ)
		copy(b[4:], v)
		return b
	}
	body := append([]byte{2, 0, 0, 7}, attr(attrPrefix, append([]byte(prefix), 0))...)
	body = append(body, attr(attrPayload, payload)...)
	m := make([]byte, nlmsgHdrLen, nlmsgHdrLen+len(body))
	binary.NativeEndian.PutUint32(m, uint32(nlmsgHdrLen+len(body)))
	binary.NativeEndian.PutUint16(m[4:], subsysULOG<<8|msgPacket)
	return append(m, body...)
}

// tcpSYN is the first 40 bytes of an IPv4 TCP packet.
func tcpSYN(src, dst netip.Addr, sport, dport uint16) []byte {
	p := make([]byte, 40)
	p[0] = 0x45
	p[9] = 6
	copy(p[12:], src.AsSlice())
	copy(p[16:], dst.AsSlice())
	binary.BigEndian.PutUint16(p[20:], sport)
	binary.BigEndian.PutUint16(p[22:], dport)
	return p
}

func TestParseNFLOG(t *testing.T) {
	src, dst := netip.MustParseAddr("100.64.0.1"), netip.MustParseAddr("100.64.0.9")
	b := append(nflogMessage(logPrefix(4, 2, true), tcpSYN(src, dst, 40000, 8080)), nflogMessage(logPrefix(4, 0, false), tcpSYN(src, dst, 40001, 22))...)
	recs, err := parseMessages(b)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	gen, id, allow, err := parsePrefix(recs[0].prefix)
	require.NoError(t, err)
	assert.Equal(t, []any{uint32(4), 2, true}, []any{gen, id, allow})
	e, err := parsePacket(recs[1].payload)
	require.NoError(t, err)
	assert.Equal(t, Event{Src: src, Dst: dst, SrcPort: 40001, DstPort: 22, Proto: policy.TCP}, e)

	for _, tc := range []struct {
		name, prefix, wantErr string
	}{
		{"other prefix", "kernel:1:2:0", `iptables: log prefix "kernel:1:2:0" is not lattice's`},
		{"verdict", "lattice:1:2:7", `iptables: log prefix "lattice:1:2:7" is not lattice's`},
		{"gen", "lattice:x:2:1", `iptables: log prefix "lattice:x:2:1": strconv.ParseUint: parsing "x": invalid syntax`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := parsePrefix(tc.prefix)
			assert.EqualError(t, err, tc.wantErr)
		})
	}
	_, err = parseMessages(b[:20])
	assert.EqualError(t, err, "iptables: netlink message of 84 bytes in 20")
	_, err = parsePacket([]byte{0x45, 0})
	assert.EqualError(t, err, "iptables: IPv4 header of 20 bytes in 2")
}

// FuzzNFLOG: any datagram the netlink socket returns is parsed or
// refused, never a panic.
func FuzzNFLOG(f *testing.F) {
	src, dst := netip.MustParseAddr("100.64.0.1"), netip.MustParseAddr("100.64.0.9")
	f.Add(nflogMessage(logPrefix(1, 0, false), tcpSYN(src, dst, 1, 2)))
	f.Add(nflogMessage("lattice:1:1:1", make([]byte, 40)))
	v6 := make([]byte, 48)
	v6[0], v6[6] = 0x60, 17
	f.Add(nflogMessage(logPrefix(2, 1, true), v6))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, _ := parseMessages(b)
		for _, r := range recs {
			_, _, _, _ = parsePrefix(r.prefix)
			_, _ = parsePacket(r.payload)
		}
	})
}
