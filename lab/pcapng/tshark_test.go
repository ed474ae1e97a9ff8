package pcapng

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/pcapng/pcapngtest"
)

// TestTsharkReadsCapture writes what the lab writes (raw IPv4 on two capture
// points, directions, NAT comments) and checks tshark decodes every field.
func TestTsharkReadsCapture(t *testing.T) {
	ts := pcapngtest.Require(t)
	comment := ts.CommentField(t)

	path := filepath.Join(t.TempDir(), "nat.pcapng")
	w, err := Create(path, Options{Comment: "interop test"})
	require.NoError(t, err)
	wan, err := w.AddInterface(Interface{Name: "nat-a/wan", Description: "NAT A public side"})
	require.NoError(t, err)
	lan, err := w.AddInterface(Interface{Name: "nat-a/lan", SnapLen: 64})
	require.NoError(t, err)

	start := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	pkts := []Packet{
		{Interface: lan, Dir: DirInbound, Data: udp4(t, "10.0.0.2", "198.51.100.7", 40000, 3478, "binding request"),
			Comment: "mapped 10.0.0.2:40000 to 203.0.113.1:40000 (endpoint-independent mapping)"},
		{Interface: wan, Dir: DirOutbound, Data: udp4(t, "203.0.113.1", "198.51.100.7", 40000, 3478, "binding request")},
		{Interface: wan, Dir: DirInbound, Data: udp4(t, "198.51.100.9", "203.0.113.1", 5000, 40000, "probe"),
			Comment: "dropped by address-and-port-dependent filtering: no mapping for udp 198.51.100.9:5000 -> 203.0.113.1:40000"},
		{Interface: lan, Data: tcp4SYN(t, "10.0.0.2", "198.51.100.7", 51000, 443, 1)},
		{Interface: lan, Dir: DirInbound, Data: udp4(t, "10.0.0.2", "198.51.100.7", 40000, 3478, strings.Repeat("x", 100)),
			Comment: "truncated to 64 bytes"},
	}
	for i, p := range pkts {
		p.Time = start.Add(time.Duration(i) * time.Millisecond)
		require.NoError(t, w.WritePacket(p))
	}
	require.NoError(t, w.Close())

	got := ts.Run(t, "-r", path, "-T", "fields",
		"-e", "frame.interface_name", "-e", "ip.src", "-e", "ip.dst", "-e", "udp.dstport", "-e", comment)
	assert.Equal(t, strings.Join([]string{
		"nat-a/lan\t10.0.0.2\t198.51.100.7\t3478\tmapped 10.0.0.2:40000 to 203.0.113.1:40000 (endpoint-independent mapping)",
		"nat-a/wan\t203.0.113.1\t198.51.100.7\t3478\t",
		"nat-a/wan\t198.51.100.9\t203.0.113.1\t40000\tdropped by address-and-port-dependent filtering: no mapping for udp 198.51.100.9:5000 -> 203.0.113.1:40000",
		"nat-a/lan\t10.0.0.2\t198.51.100.7\t\t",
		"nat-a/lan\t10.0.0.2\t198.51.100.7\t3478\ttruncated to 64 bytes",
		"",
	}, "\n"), got)

	// Directions (epb_flags), nanosecond timestamps, lengths, and
	// checksums tshark verifies itself (1 = good), so the test packets are
	// what they claim to be.
	got = ts.Run(t, "-r", path, "-T", "fields",
		"-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
		"-e", "frame.interface_id", "-e", "frame.packet_flags_direction", "-e", "frame.time_epoch",
		"-e", "frame.len", "-e", "frame.cap_len",
		"-e", "ip.checksum.status", "-e", "udp.checksum.status", "-e", "tcp.checksum.status")
	assert.Equal(t, strings.Join([]string{
		"1\t0x00000001\t1767323045.123456789\t43\t43\t1\t1\t",
		"0\t0x00000002\t1767323045.124456789\t43\t43\t1\t1\t",
		"0\t0x00000001\t1767323045.125456789\t33\t33\t1\t1\t",
		"1\t\t1767323045.126456789\t40\t40\t1\t\t1",
		"1\t0x00000001\t1767323045.127456789\t128\t64\t1\t2\t", // 2: unverified, truncated
		"",
	}, "\n"), got)
}
