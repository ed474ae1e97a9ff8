package node

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestAttemptFailedWhy: an attempt that found no pair is explained by what
// both sides had: no common address family (an IPv6-only phone behind a
// NAT64 and an IPv4-only laptop), no STUN server of ours, no STUN answer,
// or NATs that filter or map per destination.
func TestAttemptFailedWhy(t *testing.T) {
	const (
		host4  = "udp4 host 192.168.1.2:51820"
		srflx4 = "udp4 srflx 203.0.113.7:40000 related 192.168.1.2:51820"
		host6  = "udp6 host [2001:db8:1::2]:51820"
		srflx6 = "udp6 srflx [2001:db8:1::2]:51820 related [2001:db8:1::2]:51820"
	)
	for _, tc := range []struct {
		name          string
		stun          []string
		local, remote []string
		want          string
	}{
		{"no candidates from the peer", []string{"203.0.113.100:3478"}, []string{host4, srflx4}, nil,
			"the peer sent no candidates"},
		{"IPv6-only here, IPv4-only peer", []string{"203.0.113.100:3478"}, []string{host6}, []string{host4, srflx4},
			"no address family in common (IPv6 only here, IPv4 only at the peer), and ICE pairs only within one"},
		{"IPv6 here, only IPv4 STUN", []string{"203.0.113.100:3478"}, []string{host6}, []string{host6, host4},
			"no STUN server of this host's family (IPv6 only here, the STUN servers IPv4 only), so no public address to offer"},
		{"no STUN answer", []string{"203.0.113.100:3478", "[2001:db8::100]:3478"}, []string{host4}, []string{host4, srflx4},
			"UDP from here looks blocked (no STUN answer)"},
		{"no STUN answer at the peer", []string{"203.0.113.100:3478"}, []string{host4, srflx4}, []string{host4},
			"UDP to the peer looks blocked (it had no STUN answer)"},
		{"filtering NATs", []string{"203.0.113.100:3478"}, []string{host4, srflx4, host6, srflx6}, []string{host4, srflx4},
			"no candidate pair answered; a NAT on the way filters by address and port, or maps per destination (symmetric)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ICEConfig{}
			cfg.defaults()
			p := &peer{env: &peerEnv{cfg: cfg, log: slog.New(slog.DiscardHandler), stun: tc.stun}}
			p.report = &ICEReport{LocalCandidates: tc.local, RemoteCandidates: tc.remote}
			assert.Equal(t, "attempt timed out after 10s: "+tc.want, p.attemptFailedWhy())
		})
	}
}
