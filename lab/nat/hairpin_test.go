package nat

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHairpin(t *testing.T) {
	var (
		alice    = ap("192.168.1.2:5000")
		bob      = ap("192.168.1.3:6000")
		stun     = ap("198.51.100.7:3478")
		aliceExt = ap("203.0.113.10:5000")
		bobExt   = ap("203.0.113.10:6000")
	)
	tests := []struct {
		name      string
		cfg       Config
		bobSends  bool // bob has sent to alice's external endpoint first
		want      Verdict
		wantExt   bool // alice's packet arrives from aliceExt (REQ-9)
		reasonHas string
	}{
		{name: "disabled", cfg: Config{Hairpin: false}, want: Drop,
			reasonHas: "hairpinning disabled: udp 192.168.1.2:5000 → 203.0.113.10:6000"},
		{name: "full cone", cfg: Config{Hairpin: true}, want: Forward, wantExt: true},
		{name: "port-restricted, bob has not sent to alice", cfg: Config{Hairpin: true, Filtering: AddressAndPortDependent}, want: Drop,
			reasonHas: "dropped by address-and-port-dependent filtering: 192.168.1.3:6000 has not sent to 203.0.113.10:5000"},
		{name: "port-restricted, bob has sent to alice", cfg: Config{Hairpin: true, Filtering: AddressAndPortDependent}, bobSends: true, want: Forward, wantExt: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNAT(t, tt.cfg)
			// Both learn their external endpoints from a STUN server.
			for _, c := range []struct{ from, ext string }{{alice.String(), aliceExt.String()}, {bob.String(), bobExt.String()}} {
				ext, res := sendOut(t, n, t0, ap(c.from), stun)
				require.Equal(t, ap(c.ext), ext, res.Reason)
			}
			if tt.bobSends {
				// Bob's packet to alice is itself hairpinned, and
				// dropped by alice's filter (she has not sent to bob
				// yet), but it opens bob's filter for alice.
				res := process(t, n, t0, udpPkt(bob, aliceExt), FromInside)
				require.Equal(t, Drop, res.Verdict)
			}
			pkt := udpPkt(alice, bobExt)
			res := process(t, n, t0, pkt, FromInside)
			require.Equal(t, tt.want, res.Verdict, res.Reason)
			if tt.want == Drop {
				assert.Contains(t, res.Reason, tt.reasonHas)
				assert.False(t, res.Hairpin)
				return
			}
			assert.True(t, res.Hairpin)
			src, dst := endpoints(pkt)
			assert.Equal(t, aliceExt, src, "the receiver sees the sender's external endpoint")
			assert.Equal(t, bob, dst)
			assert.Equal(t, uint64(1), n.Stats().Hairpinned)

			// And bob's reply comes back the same way.
			reply := udpPkt(bob, aliceExt)
			res = process(t, n, t0, reply, FromInside)
			require.Equal(t, Forward, res.Verdict, res.Reason)
			assert.True(t, res.Hairpin)
			src, dst = endpoints(reply)
			assert.Equal(t, bobExt, src)
			assert.Equal(t, alice, dst)
		})
	}
}

func TestHairpinStats(t *testing.T) {
	n := newNAT(t, Config{})
	res := process(t, n, t0, udpPkt(inside1, ext1), FromInside)
	assert.Equal(t, Drop, res.Verdict)
	assert.Equal(t, "hairpinning disabled: udp 192.168.1.2:5000 → 203.0.113.10:5000", res.Reason)
	assert.Equal(t, uint64(1), n.Stats().DroppedHairpinDisabled)
	assert.Empty(t, n.Mappings(t0), "a refused hairpin makes no mapping")
}

func TestHairpinNoMapping(t *testing.T) {
	n := newNAT(t, Config{Hairpin: true, Filtering: AddressDependent})
	res := process(t, n, t0, udpPkt(inside1, ap("203.0.113.10:7777")), FromInside)
	assert.Equal(t, Drop, res.Verdict)
	assert.Equal(t, "dropped by address-dependent filtering: no mapping for udp 192.168.1.2:5000 → 203.0.113.10:7777", res.Reason)
}

func TestHairpinTCP(t *testing.T) {
	// A server behind the NAT reached through the public address after it
	// has opened its mapping (e.g. by an outbound SYN to a peer).
	n := newNAT(t, Config{Hairpin: true})
	server, client := ap("192.168.1.3:8443"), ap("192.168.1.2:40000")
	require.Equal(t, Forward, process(t, n, t0, tcpPkt(server, remote1, tcpSYN), FromInside).Verdict)
	syn := tcpPkt(client, ap("203.0.113.10:8443"), tcpSYN)
	res := process(t, n, t0, syn, FromInside)
	require.Equal(t, Forward, res.Verdict, res.Reason)
	assert.True(t, res.Hairpin)
	src, dst := endpoints(syn)
	assert.Equal(t, ap("203.0.113.10:40000"), src)
	assert.Equal(t, server, dst)
}
