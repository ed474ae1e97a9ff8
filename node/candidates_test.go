package node

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/pion/ice/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
)

// kernelModeHost is a host whose overlay interface is a kernel one, as in
// kernel mode: lattice0 carries the node's overlay address.
type kernelModeHost struct{ netx.Network }

func (kernelModeHost) Interfaces() ([]netx.Interface, error) {
	up := net.FlagUp | net.FlagRunning
	return []netx.Interface{
		{Index: 1, Name: "lo", MTU: 65536, Flags: up | net.FlagLoopback, Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}},
		{Index: 2, Name: "eth0", MTU: 1500, Flags: up, Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}},
		{Index: 3, Name: "lattice0", MTU: 1420, Flags: up, Addrs: []netip.Prefix{
			netip.MustParsePrefix("100.69.109.113/10"), netip.MustParsePrefix("fe80::1/64")}},
		// A carrier-grade NAT's network numbered from the same /10 is real.
		{Index: 4, Name: "wwan0", MTU: 1500, Flags: up, Addrs: []netip.Prefix{netip.MustParsePrefix("100.70.0.7/16")}},
	}, nil
}

// TestHostCandidatesSkipOverlay: the addresses pion's UDPMux offers as
// host candidates (its socket listens on every address) leave out the
// overlay interface, and only it.
func TestHostCandidatesSkipOverlay(t *testing.T) {
	overlay := netip.MustParseAddr("100.69.109.113")
	pc, err := netx.OS.ListenPacket(context.Background(), "udp4", "0.0.0.0:0")
	require.NoError(t, err)
	pn, err := netx.PionNet(withoutOverlay{kernelModeHost{netx.OS}, overlay})
	require.NoError(t, err)
	mux := ice.NewUniversalUDPMuxDefault(ice.UniversalUDPMuxParams{UDPConn: pc, Net: pn})
	t.Cleanup(func() { _ = mux.Close() })

	var got []string
	for _, a := range mux.GetListenAddresses() {
		got = append(got, a.(*net.UDPAddr).IP.String())
	}
	assert.ElementsMatch(t, []string{"127.0.0.1", "192.0.2.10", "100.70.0.7"}, got)
}

func TestHostCandidateFilter(t *testing.T) {
	overlay := netip.MustParseAddr("100.69.109.113")
	tests := []struct {
		name string
		keep func(netip.Addr) bool
		ip   string
		want bool
	}{
		{"lan", nil, "192.0.2.10", true},
		{"overlay", nil, "100.69.109.113", false},
		{"cgnat network", nil, "100.70.0.7", true},
		{"loopback", nil, "127.0.0.1", false},
		{"overlay even if Candidates keeps all", func(netip.Addr) bool { return true }, "100.69.109.113", false},
		{"Candidates decides the rest", func(a netip.Addr) bool { return a.IsLoopback() }, "127.0.0.1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, hostCandidateFilter(overlay, tt.keep)(net.ParseIP(tt.ip)))
		})
	}
}
