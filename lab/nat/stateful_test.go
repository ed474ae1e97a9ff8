package nat

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ip6Pkt builds an IPv6 packet with next header nh and payload t (checksums
// are not the filter's business).
func ip6Pkt(src, dst netip.Addr, nh uint8, t []byte) []byte {
	p := make([]byte, 40+len(t))
	p[0] = 6 << 4
	binary.BigEndian.PutUint16(p[4:6], uint16(len(t)))
	p[6], p[7] = nh, 64
	s, d := src.As16(), dst.As16()
	copy(p[8:24], s[:])
	copy(p[24:40], d[:])
	copy(p[40:], t)
	return p
}

func udp6(src, dst netip.AddrPort) []byte {
	t := make([]byte, 12)
	binary.BigEndian.PutUint16(t[0:2], src.Port())
	binary.BigEndian.PutUint16(t[2:4], dst.Port())
	binary.BigEndian.PutUint16(t[4:6], 12)
	return ip6Pkt(src.Addr(), dst.Addr(), 17, t)
}

func tcp6(src, dst netip.AddrPort, flags uint8) []byte {
	t := make([]byte, 20)
	binary.BigEndian.PutUint16(t[0:2], src.Port())
	binary.BigEndian.PutUint16(t[2:4], dst.Port())
	t[12], t[13] = 5<<4, flags
	return ip6Pkt(src.Addr(), dst.Addr(), 6, t)
}

func icmp6(src, dst netip.Addr, typ uint8, id uint16, body []byte) []byte {
	t := make([]byte, 8+len(body))
	t[0] = typ
	binary.BigEndian.PutUint16(t[4:6], id)
	copy(t[8:], body)
	return ip6Pkt(src, dst, 58, t)
}

var (
	in6     = ap("[2001:db8:1::10]:4000")
	remote6 = ap("[2001:db8:ff::7]:3478")
)

func newStateful(t *testing.T, f Filtering) *Stateful {
	t.Helper()
	s, err := NewStateful(StatefulConfig{Filtering: f, UDPTimeout: 30 * time.Second})
	require.NoError(t, err)
	return s
}

func TestStatefulFilteringBehaviours(t *testing.T) {
	otherPort := netip.AddrPortFrom(remote6.Addr(), 9999)
	otherAddr := ap("[2001:db8:ee::9]:3478")
	for _, tc := range []struct {
		f                    Filtering
		samePort, otherAddrs bool // whether the other port / other address get in
	}{
		{EndpointIndependent, true, true},
		{AddressDependent, true, false},
		{AddressAndPortDependent, false, false},
	} {
		t.Run(tc.f.String(), func(t *testing.T) {
			s := newStateful(t, tc.f)
			res := s.Process(t0, udp6(remote6, in6), FromOutside)
			assert.Equal(t, Drop, res.Verdict, "unsolicited inbound")
			assert.Contains(t, res.Reason, "no state for udp")
			res = s.Process(t0, udp6(in6, remote6), FromInside)
			assert.Equal(t, Forward, res.Verdict)
			assert.Contains(t, res.Reason, "opened udp")
			assert.Equal(t, Forward, s.Process(t0, udp6(remote6, in6), FromOutside).Verdict, "the reply")
			assert.Equal(t, tc.samePort, s.Process(t0, udp6(otherPort, in6), FromOutside).Verdict == Forward, "same address, other port")
			assert.Equal(t, tc.otherAddrs, s.Process(t0, udp6(otherAddr, in6), FromOutside).Verdict == Forward, "other address")
			assert.Equal(t, Drop, s.Process(t0, udp6(remote6, ap("[2001:db8:1::10]:4001")), FromOutside).Verdict, "another inside port")
		})
	}
}

func TestStatefulTimeouts(t *testing.T) {
	s := newStateful(t, AddressAndPortDependent)
	s.Process(t0, udp6(in6, remote6), FromInside)
	assert.Equal(t, Forward, s.Process(t0.Add(29*time.Second), udp6(remote6, in6), FromOutside).Verdict)
	// Inbound packets do not refresh (RefreshOutbound): 30 s after the
	// last outbound packet the state is gone.
	assert.Equal(t, Drop, s.Process(t0.Add(30*time.Second), udp6(remote6, in6), FromOutside).Verdict)
	s.Process(t0.Add(40*time.Second), udp6(in6, remote6), FromInside)
	assert.Equal(t, Forward, s.Process(t0.Add(69*time.Second), udp6(remote6, in6), FromOutside).Verdict, "refreshed by outbound")
	assert.Equal(t, 1, s.States(t0.Add(69*time.Second)))
	assert.Equal(t, 0, s.States(t0.Add(70*time.Second)))
	st := s.Stats()
	assert.EqualValues(t, 2, st.NewStates)
	assert.EqualValues(t, 1, st.DroppedNoState)
}

func TestStatefulTCPAndICMP(t *testing.T) {
	s := newStateful(t, AddressAndPortDependent)
	srv := ap("[2001:db8:ff::7]:443")
	assert.Equal(t, Drop, s.Process(t0, tcp6(srv, in6, tcpSYN), FromOutside).Verdict, "inbound SYN")
	s.Process(t0, tcp6(in6, srv, tcpSYN), FromInside)
	assert.Equal(t, Forward, s.Process(t0, tcp6(srv, in6, tcpSYN|tcpACK), FromOutside).Verdict, "SYN-ACK")
	// Established: the 2h4m timeout, not the 4m transitory one.
	s.Process(t0, tcp6(in6, srv, tcpACK), FromInside)
	assert.Equal(t, Forward, s.Process(t0.Add(time.Hour), tcp6(srv, in6, tcpACK), FromOutside).Verdict)

	far := netip.MustParseAddr("2001:db8:ff::7")
	inside := in6.Addr()
	assert.Equal(t, Drop, s.Process(t0, icmp6(far, inside, icmp6EchoRequest, 5, nil), FromOutside).Verdict, "unsolicited echo request")
	s.Process(t0, icmp6(inside, far, icmp6EchoRequest, 5, nil), FromInside)
	assert.Equal(t, Forward, s.Process(t0, icmp6(far, inside, icmp6EchoReply, 5, nil), FromOutside).Verdict)
	assert.Equal(t, Drop, s.Process(t0, icmp6(far, inside, icmp6EchoReply, 6, nil), FromOutside).Verdict, "other identifier")

	// Errors: Packet Too Big always passes; port unreachable only about a
	// flow an inside host opened.
	assert.Equal(t, Forward, s.Process(t0, icmp6(far, inside, icmp6PacketTooBig, 0, udp6(in6, ap("[2001:db8:aa::1]:53"))), FromOutside).Verdict)
	s.Process(t0, udp6(in6, remote6), FromInside)
	assert.Equal(t, Forward, s.Process(t0, icmp6(far, inside, 1, 0, udp6(in6, remote6)[:48]), FromOutside).Verdict, "unreachable about a flow, quote cut short")
	res := s.Process(t0, icmp6(far, inside, 1, 0, udp6(in6, ap("[2001:db8:aa::1]:53"))), FromOutside)
	assert.Equal(t, Drop, res.Verdict)
	assert.Contains(t, res.Reason, "icmpv6 error type 1")
}

func TestStatefulMalformedAndLimits(t *testing.T) {
	s := newStateful(t, EndpointIndependent)
	for _, p := range [][]byte{nil, {0x60}, udp6(in6, remote6)[:44], {0x45, 0, 0, 20}} {
		res := s.Process(t0, p, FromInside)
		assert.Equal(t, Drop, res.Verdict)
		assert.Contains(t, res.Reason, "malformed")
	}
	full, err := NewStateful(StatefulConfig{MaxStates: 1})
	require.NoError(t, err)
	assert.Equal(t, Forward, full.Process(t0, udp6(in6, remote6), FromInside).Verdict)
	res := full.Process(t0, udp6(in6, ap("[2001:db8:ff::8]:1")), FromInside)
	assert.Equal(t, Drop, res.Verdict)
	assert.Equal(t, "state table full", res.Reason)
	_, err = NewStateful(StatefulConfig{UDPTimeout: -time.Second})
	assert.ErrorIs(t, err, ErrInvalidConfig)
	cfg, err := FirewallProfile("ipv6-firewall")
	require.NoError(t, err)
	assert.Equal(t, AddressAndPortDependent, cfg.Filtering)
	_, err = FirewallProfile("ipv6-wall")
	assert.ErrorContains(t, err, "known: ipv6-firewall")
}

// FuzzStateful feeds arbitrary bytes both ways through the filter: it
// must never panic or change the packet, and a drop says why.
func FuzzStateful(f *testing.F) {
	f.Add(udp6(in6, remote6), false)
	f.Add(udp6(remote6, in6), true)
	f.Add(tcp6(in6, remote6, tcpSYN), false)
	f.Add(icmp6(remote6.Addr(), in6.Addr(), 1, 0, udp6(in6, remote6)), true)
	f.Add(ip6Pkt(in6.Addr(), remote6.Addr(), 0, []byte{17, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 0, 12, 0, 0}), false)
	f.Add(ip6Pkt(in6.Addr(), remote6.Addr(), 44, []byte{17, 0, 0, 8, 0, 0, 0, 1}), true)
	f.Fuzz(func(t *testing.T, p []byte, inbound bool) {
		s, err := NewStateful(StatefulConfig{Filtering: AddressDependent})
		require.NoError(t, err)
		s.Process(t0, udp6(in6, remote6), FromInside)
		dir := FromInside
		if inbound {
			dir = FromOutside
		}
		orig := append([]byte(nil), p...)
		res := s.Process(t0, p, dir)
		assert.True(t, bytes.Equal(orig, p), "the packet changed")
		if res.Verdict == Drop {
			assert.NotEmpty(t, res.Reason)
		}
	})
}
