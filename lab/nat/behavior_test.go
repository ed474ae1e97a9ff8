package nat

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMappingFilteringMatrix sends from one internal endpoint to two remote
// IPs and two remote ports, then probes the first mapping from four remotes.
func TestMappingFilteringMatrix(t *testing.T) {
	var (
		inside = ap("192.168.1.2:5000")
		a1     = ap("198.51.100.7:3478") // sent to
		a2     = ap("198.51.100.7:3479") // same IP, other port: sent to
		b1     = ap("198.51.100.9:3478") // other IP: sent to
		a9     = ap("198.51.100.7:9999") // same IP as a1, never sent to
		c1     = ap("192.0.2.77:3478")   // other IP, never sent to
	)
	type probes struct{ a1, a9, b1, c1 bool } // does a packet from X to a1's external port pass?
	tests := []struct {
		name      string
		mapping   Mapping
		filtering Filtering
		wantPorts [3]uint16 // external ports used towards a1, a2, b1
		want      probes
	}{
		{"EIM/EIF", EndpointIndependent, EndpointIndependent, [3]uint16{40000, 40000, 40000}, probes{true, true, true, true}},
		{"EIM/ADF", EndpointIndependent, AddressDependent, [3]uint16{40000, 40000, 40000}, probes{true, true, true, false}},
		{"EIM/APDF", EndpointIndependent, AddressAndPortDependent, [3]uint16{40000, 40000, 40000}, probes{true, false, true, false}},
		{"ADM/EIF", AddressDependent, EndpointIndependent, [3]uint16{40000, 40000, 40001}, probes{true, true, true, true}},
		{"ADM/ADF", AddressDependent, AddressDependent, [3]uint16{40000, 40000, 40001}, probes{true, true, false, false}},
		{"ADM/APDF", AddressDependent, AddressAndPortDependent, [3]uint16{40000, 40000, 40001}, probes{true, false, false, false}},
		{"APDM/EIF", AddressAndPortDependent, EndpointIndependent, [3]uint16{40000, 40001, 40002}, probes{true, true, true, true}},
		{"APDM/ADF", AddressAndPortDependent, AddressDependent, [3]uint16{40000, 40001, 40002}, probes{true, true, false, false}},
		{"APDM/APDF", AddressAndPortDependent, AddressAndPortDependent, [3]uint16{40000, 40001, 40002}, probes{true, false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNAT(t, Config{
				Mapping: tt.mapping, Filtering: tt.filtering,
				PortAllocation: Sequential, PortMin: 40000, PortMax: 40099,
			})
			var got [3]uint16
			for i, to := range []netip.AddrPort{a1, a2, b1} {
				ext, res := sendOut(t, n, t0, inside, to)
				require.Equal(t, Forward, res.Verdict, res.Reason)
				assert.Equal(t, public, ext.Addr())
				got[i] = ext.Port()
			}
			assert.Equal(t, tt.wantPorts, got, "external ports towards a1, a2, b1")

			ext := netip.AddrPortFrom(public, got[0])
			for _, p := range []struct {
				name string
				from netip.AddrPort
				want bool
			}{
				{"same ip and port", a1, tt.want.a1},
				{"same ip, other port", a9, tt.want.a9},
				{"other ip sent to", b1, tt.want.b1},
				{"other ip never sent to", c1, tt.want.c1},
			} {
				dst, res := sendIn(t, n, t0, p.from, ext)
				if p.want {
					assert.Equal(t, Forward, res.Verdict, "%s: %s", p.name, res.Reason)
					assert.Equal(t, inside, dst, p.name)
				} else {
					assert.Equal(t, Drop, res.Verdict, p.name)
					assert.Contains(t, res.Reason, "dropped by "+tt.filtering.String()+" filtering: ", p.name)
				}
			}
		})
	}
}

func TestFilteredReasons(t *testing.T) {
	tests := []struct {
		name      string
		filtering Filtering
		from      netip.AddrPort
		to        netip.AddrPort
		want      string
	}{
		{
			name: "no mapping", filtering: AddressAndPortDependent,
			from: ap("198.51.100.7:3478"), to: ap("203.0.113.10:40001"),
			want: "dropped by address-and-port-dependent filtering: no mapping for udp 198.51.100.7:3478 → 203.0.113.10:40001",
		},
		{
			name: "address-dependent", filtering: AddressDependent,
			from: ap("198.51.100.9:3478"), to: ap("203.0.113.10:5000"),
			want: "dropped by address-dependent filtering: 192.168.1.2:5000 has not sent to 198.51.100.9 (udp 198.51.100.9:3478 → 203.0.113.10:5000)",
		},
		{
			name: "address-and-port-dependent", filtering: AddressAndPortDependent,
			from: ap("198.51.100.7:3479"), to: ap("203.0.113.10:5000"),
			want: "dropped by address-and-port-dependent filtering: 192.168.1.2:5000 has not sent to 198.51.100.7:3479 (udp 198.51.100.7:3479 → 203.0.113.10:5000)",
		},
		{
			name: "not to the public address", filtering: EndpointIndependent,
			from: ap("198.51.100.7:3478"), to: ap("203.0.113.99:5000"),
			want: "dropped: udp 198.51.100.7:3478 → 203.0.113.99:5000 is not addressed to the public address 203.0.113.10",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNAT(t, Config{Filtering: tt.filtering})
			ext, res := sendOut(t, n, t0, ap("192.168.1.2:5000"), ap("198.51.100.7:3478"))
			require.Equal(t, ap("203.0.113.10:5000"), ext, res.Reason)
			assert.Equal(t, "udp 192.168.1.2:5000 → 203.0.113.10:5000 (new mapping)", res.Reason)
			_, res = sendIn(t, n, t0, tt.from, tt.to)
			assert.Equal(t, Drop, res.Verdict)
			assert.Equal(t, tt.want, res.Reason)
		})
	}
}
