package nat

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPortAllocation(t *testing.T) {
	// Each flow is a distinct internal endpoint sending to the same remote.
	remote := ap("198.51.100.7:3478")
	tests := []struct {
		name  string
		cfg   Config
		from  []string
		ports []uint16
	}{
		{
			name:  "preserve",
			cfg:   Config{PortAllocation: Preserve},
			from:  []string{"192.168.1.2:5000", "192.168.1.3:5001"},
			ports: []uint16{5000, 5001},
		},
		{
			name:  "preserve collision falls back to sequential",
			cfg:   Config{PortAllocation: Preserve, PortMin: 5000, PortMax: 5010},
			from:  []string{"192.168.1.2:5003", "192.168.1.3:5003", "192.168.1.4:5003", "192.168.1.5:5000"},
			ports: []uint16{5003, 5000, 5001, 5002},
		},
		{
			name:  "preserve outside the range falls back",
			cfg:   Config{PortAllocation: Preserve, PortMin: 40000, PortMax: 40010},
			from:  []string{"192.168.1.2:53", "192.168.1.3:40005", "192.168.1.4:50000"},
			ports: []uint16{40000, 40005, 40001},
		},
		{
			name:  "preserve below the default range",
			cfg:   Config{},
			from:  []string{"192.168.1.2:123"},
			ports: []uint16{1024},
		},
		{
			name:  "sequential ignores the internal port",
			cfg:   Config{PortAllocation: Sequential, PortMin: 6000, PortMax: 6002},
			from:  []string{"192.168.1.2:6002", "192.168.1.3:6002", "192.168.1.4:6002"},
			ports: []uint16{6000, 6001, 6002},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNAT(t, tt.cfg)
			var got []uint16
			for _, f := range tt.from {
				ext, res := sendOut(t, n, t0, ap(f), remote)
				require.Equal(t, Forward, res.Verdict, res.Reason)
				got = append(got, ext.Port())
			}
			assert.Equal(t, tt.ports, got)
		})
	}
}

func TestSequentialWrapsAroundFreedPorts(t *testing.T) {
	n := newNAT(t, Config{PortAllocation: Sequential, PortMin: 7000, PortMax: 7002, UDPTimeout: time.Minute})
	remote := ap("198.51.100.7:3478")
	for i, want := range []uint16{7000, 7001, 7002} {
		ext, _ := sendOut(t, n, t0, netip.AddrPortFrom(netip.MustParseAddr("192.168.1.2"), uint16(100+i)), remote)
		require.Equal(t, want, ext.Port())
	}
	// Keep 7001 alive; the others expire, and the cursor wraps to 7000.
	sendOut(t, n, t0.Add(30*time.Second), ap("192.168.1.2:101"), remote)
	later := t0.Add(time.Minute)
	ext, res := sendOut(t, n, later, ap("192.168.1.9:9"), remote)
	assert.Equal(t, uint16(7000), ext.Port(), res.Reason)
	ext, res = sendOut(t, n, later, ap("192.168.1.9:10"), remote)
	assert.Equal(t, uint16(7002), ext.Port(), res.Reason)
}

func TestRandomAllocation(t *testing.T) {
	alloc := func(seed uint64) []uint16 {
		n := newNAT(t, Config{PortAllocation: Random, PortMin: 20000, PortMax: 20999, Seed: seed})
		var ports []uint16
		for i := range 200 {
			ext, res := sendOut(t, n, t0, netip.AddrPortFrom(netip.MustParseAddr("192.168.1.2"), uint16(20000+i)), ap("198.51.100.7:3478"))
			require.Equal(t, Forward, res.Verdict, res.Reason)
			ports = append(ports, ext.Port())
		}
		return ports
	}
	a, b, c := alloc(1), alloc(1), alloc(2)
	assert.Equal(t, a, b, "same seed, same ports")
	assert.NotEqual(t, a, c, "different seed, different ports")
	seen := map[uint16]bool{}
	preserved := 0
	for i, p := range a {
		assert.GreaterOrEqual(t, p, uint16(20000))
		assert.LessOrEqual(t, p, uint16(20999))
		assert.False(t, seen[p], "port %d handed out twice", p)
		seen[p] = true
		if p == uint16(20000+i) {
			preserved++
		}
	}
	assert.Less(t, preserved, 10, "random allocation looks like port preservation")
}

func TestRandomAllocationFillsTheRange(t *testing.T) {
	n := newNAT(t, Config{PortAllocation: Random, PortMin: 30000, PortMax: 30063})
	seen := map[uint16]bool{}
	for i := range 64 {
		ext, res := sendOut(t, n, t0, netip.AddrPortFrom(netip.MustParseAddr("192.168.1.2"), uint16(1+i)), ap("198.51.100.7:3478"))
		require.Equal(t, Forward, res.Verdict, res.Reason)
		seen[ext.Port()] = true
	}
	assert.Len(t, seen, 64)
}

func TestPortRangeExhausted(t *testing.T) {
	for _, pa := range []PortAllocation{Preserve, Sequential, Random} {
		t.Run(pa.String(), func(t *testing.T) {
			n := newNAT(t, Config{PortAllocation: pa, PortMin: 9000, PortMax: 9002, UDPTimeout: time.Minute})
			remote := ap("198.51.100.7:3478")
			for i := range 3 {
				_, res := sendOut(t, n, t0, netip.AddrPortFrom(netip.MustParseAddr("192.168.1.2"), uint16(9000+i)), remote)
				require.Equal(t, Forward, res.Verdict, res.Reason)
			}
			_, res := sendOut(t, n, t0, ap("192.168.1.3:9000"), remote)
			assert.Equal(t, Drop, res.Verdict)
			assert.Equal(t, "dropped: udp port range 9000-9002 exhausted: udp 192.168.1.3:9000 → 198.51.100.7:3478", res.Reason)
			assert.Equal(t, uint64(1), n.Stats().DroppedPortsExhausted)

			// TCP has its own ports.
			res = process(t, n, t0, tcpPkt(ap("192.168.1.3:9000"), remote, tcpSYN), FromInside)
			assert.Equal(t, Forward, res.Verdict, res.Reason)

			// Once the mappings time out their ports are free again.
			_, res = sendOut(t, n, t0.Add(time.Minute), ap("192.168.1.3:9000"), remote)
			assert.Equal(t, Forward, res.Verdict, res.Reason)
		})
	}
}

func TestMaxMappings(t *testing.T) {
	n := newNAT(t, Config{MaxMappings: 3, UDPTimeout: time.Minute})
	remote := ap("198.51.100.7:3478")
	for i := range 3 {
		_, res := sendOut(t, n, t0, ap(fmt.Sprintf("192.168.1.%d:5000", 2+i)), remote)
		require.Equal(t, Forward, res.Verdict, res.Reason)
	}
	// Existing flows keep working; new ones in any protocol do not.
	_, res := sendOut(t, n, t0, ap("192.168.1.2:5000"), remote)
	assert.Equal(t, Forward, res.Verdict, res.Reason)
	_, res = sendOut(t, n, t0, ap("192.168.1.9:5000"), remote)
	assert.Equal(t, Drop, res.Verdict)
	assert.Equal(t, "dropped: mapping table full (3 mappings): udp 192.168.1.9:5000 → 198.51.100.7:3478", res.Reason)
	res = process(t, n, t0, icmpEcho(icmpEchoRequest, netip.MustParseAddr("192.168.1.9"), remote.Addr(), 7), FromInside)
	assert.Equal(t, Drop, res.Verdict)
	assert.Equal(t, uint64(2), n.Stats().DroppedTableFull)

	// Expired mappings make room.
	_, res = sendOut(t, n, t0.Add(time.Minute+30*time.Second), ap("192.168.1.9:5000"), remote)
	assert.Equal(t, Forward, res.Verdict, res.Reason)
	assert.Len(t, n.Mappings(t0.Add(time.Minute+30*time.Second)), 1)
}
