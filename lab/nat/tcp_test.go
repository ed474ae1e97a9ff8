package nat

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTCPNeedsSYN(t *testing.T) {
	tests := []struct {
		name  string
		flags uint8
		want  Verdict
	}{
		{"syn", tcpSYN, Forward},
		{"ack", tcpACK, Drop},
		{"fin", tcpFIN | tcpACK, Drop},
		{"rst", tcpRST, Drop},
		{"psh-ack", 0x18, Drop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNAT(t, Config{})
			res := process(t, n, t0, tcpPkt(inside1, remote1, tt.flags), FromInside)
			assert.Equal(t, tt.want, res.Verdict, res.Reason)
			if tt.want == Drop {
				assert.Equal(t, "dropped: no mapping for tcp 192.168.1.2:5000 → 198.51.100.7:3478 and it is not a SYN", res.Reason)
				assert.Equal(t, uint64(1), n.Stats().DroppedNoMapping)
				assert.Empty(t, n.Mappings(t0))
			}
		})
	}
}

func TestTCPExpiredNeedsSYN(t *testing.T) {
	n := newNAT(t, Config{TCPTransitoryTimeout: time.Minute})
	tcpHalfOpen.open(t, n, t0)
	res := process(t, n, t0.Add(time.Minute), tcpPkt(inside1, remote1, tcpACK), FromInside)
	assert.Equal(t, Drop, res.Verdict)
}

func TestTCPStates(t *testing.T) {
	type step struct {
		dir   Direction
		flags uint8
	}
	tests := []struct {
		name  string
		steps []step
		want  string
	}{
		{"syn", []step{{FromInside, tcpSYN}}, "syn-sent"},
		{"syn, syn-ack", []step{{FromInside, tcpSYN}, {FromOutside, tcpSYN | tcpACK}}, "established"},
		{"simultaneous open", []step{{FromInside, tcpSYN}, {FromOutside, tcpSYN}}, "established"},
		{"one fin", []step{{FromInside, tcpSYN}, {FromOutside, tcpSYN | tcpACK}, {FromOutside, tcpFIN | tcpACK}}, "fin-wait"},
		{"fin both ways", []step{{FromInside, tcpSYN}, {FromOutside, tcpSYN | tcpACK}, {FromOutside, tcpFIN}, {FromInside, tcpFIN | tcpACK}}, "closed"},
		{"refused", []step{{FromInside, tcpSYN}, {FromOutside, tcpRST | tcpACK}}, "reset"},
		{"reused after close", []step{{FromInside, tcpSYN}, {FromOutside, tcpSYN | tcpACK}, {FromInside, tcpRST}, {FromInside, tcpSYN}}, "syn-sent"},
		{"reused after close by inbound syn", []step{{FromInside, tcpSYN}, {FromOutside, tcpRST}, {FromOutside, tcpSYN}}, "syn-received"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNAT(t, Config{})
			for _, s := range tt.steps {
				pkt := tcpPkt(inside1, remote1, s.flags)
				if s.dir == FromOutside {
					pkt = tcpPkt(remote1, ext1, s.flags)
				}
				res := process(t, n, t0, pkt, s.dir)
				require.Equal(t, Forward, res.Verdict, res.Reason)
			}
			m := n.Mappings(t0)
			require.Len(t, m, 1)
			assert.Equal(t, tt.want, m[0].TCPState)
		})
	}
}

// TestTCPSimultaneousOpen: both peers SYN each other's external endpoint
// (learned through a rendezvous server). Our host's SYN leaves first and
// creates the mapping; the peer's SYN then arrives on it.
func TestTCPSimultaneousOpen(t *testing.T) {
	peer := ap("198.51.100.7:4000")
	tests := []struct {
		name      string
		mapping   Mapping
		filtering Filtering
		from      string // source of the inbound SYN
		want      Verdict
	}{
		{"EIM/EIF from peer", EndpointIndependent, EndpointIndependent, "198.51.100.7:4000", Forward},
		{"EIM/EIF from anyone", EndpointIndependent, EndpointIndependent, "192.0.2.5:80", Forward},
		{"EIM/APDF from peer", EndpointIndependent, AddressAndPortDependent, "198.51.100.7:4000", Forward},
		{"EIM/APDF from peer's other port", EndpointIndependent, AddressAndPortDependent, "198.51.100.7:4001", Drop},
		{"EIM/ADF from peer's other port", EndpointIndependent, AddressDependent, "198.51.100.7:4001", Forward},
		{"APDM/APDF from peer", AddressAndPortDependent, AddressAndPortDependent, "198.51.100.7:4000", Forward},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNAT(t, Config{Mapping: tt.mapping, Filtering: tt.filtering})
			syn := tcpPkt(inside1, peer, tcpSYN)
			require.Equal(t, Forward, process(t, n, t0, syn, FromInside).Verdict)
			ext, _ := endpoints(syn)

			in := tcpPkt(ap(tt.from), ext, tcpSYN)
			res := process(t, n, t0, in, FromOutside)
			require.Equal(t, tt.want, res.Verdict, res.Reason)
			if tt.want == Drop {
				return
			}
			_, dst := endpoints(in)
			assert.Equal(t, inside1, dst)
			// Our host answers with a SYN-ACK and the connection is up.
			res = process(t, n, t0, tcpPkt(inside1, ap(tt.from), tcpSYN|tcpACK), FromInside)
			require.Equal(t, Forward, res.Verdict, res.Reason)
			var states []string
			for _, m := range n.Mappings(t0) {
				if m.External == ext {
					states = append(states, m.TCPState)
				}
			}
			assert.Equal(t, []string{"established"}, states)
		})
	}
}

func TestTCPInboundSYNWithoutMapping(t *testing.T) {
	n := newNAT(t, Config{})
	res := process(t, n, t0, tcpPkt(remote1, ext1, tcpSYN), FromOutside)
	assert.Equal(t, Drop, res.Verdict)
	assert.Equal(t, "dropped by endpoint-independent filtering: no mapping for tcp 198.51.100.7:3478 → 203.0.113.10:5000", res.Reason)
}
