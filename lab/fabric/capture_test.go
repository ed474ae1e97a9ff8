package fabric

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/clock"
	"github.com/latticelab/lattice/lab/pcapng"
	"github.com/latticelab/lattice/lab/pcapng/pcapngtest"
)

// TestCaptureTracesNAT captures the NAT's uplink and the internet segment
// while a host opens a mapping and a stranger probes it, then reads the file
// with tshark: the new mapping and the filtered probe are annotated.
func TestCaptureTracesNAT(t *testing.T) {
	ts := pcapngtest.Require(t)
	comment := ts.CommentField(t)

	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "port-restricted-cone"), 1)
	path := filepath.Join(t.TempDir(), "nat.pcapng")
	pw, err := pcapng.Create(path, pcapng.Options{Application: "lattice fabric test"})
	require.NoError(t, err)
	require.NoError(t, s.router.Uplink().CaptureInterface(pw))
	require.NoError(t, w.f.Network("internet").Capture(pw))

	ctx := ctxT(t, 5*time.Second)
	spc, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:3478")
	require.NoError(t, err)
	defer spc.Close()
	go udpEcho(spc)
	stranger, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:9999")
	require.NoError(t, err)
	defer stranger.Close()

	c, err := s.hosts[0].ListenPacket(ctx, "udp4", ":4000")
	require.NoError(t, err)
	defer c.Close()
	ext, _, err := roundTrip(c, netip.MustParseAddrPort("203.0.113.100:3478"), "hello", time.Second)
	require.NoError(t, err)
	_, err = stranger.WriteTo([]byte("knock"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(ext)))
	require.NoError(t, err)
	_, err = stranger.WriteTo([]byte("knock"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.10:5555")))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.router.Stats().NAT == 2 }, 2*time.Second, 5*time.Millisecond)

	s.router.Uplink().StopCapture()
	w.f.Network("internet").StopCapture()
	require.NoError(t, pw.Close())

	out := ts.Run(t, "-r", path, "-T", "fields", "-E", "separator=|",
		"-e", "frame.interface_name", "-e", "ip.src", "-e", "udp.srcport", "-e", "ip.dst", "-e", "udp.dstport", "-e", comment)
	t.Logf("tshark:\n%s", out)
	var sawMapping, sawDrop, sawNoMapping, sawOnWire bool
	for line := range strings.Lines(out) {
		f := strings.Split(strings.TrimSpace(line), "|")
		require.Len(t, f, 6, "line %q", line)
		if f[0] == "internet" && f[1] == "203.0.113.10" && f[3] == "203.0.113.100" && f[4] == "3478" {
			sawOnWire = true
		}
		if strings.Contains(f[5], "new mapping") && f[1] == "203.0.113.10" && f[0] == "nata/wan" {
			sawMapping = true
		}
		if strings.HasPrefix(f[5], "dropped by address-and-port-dependent filtering: 192.168.1.2:4000 has not sent to 203.0.113.100:9999") {
			sawDrop = true
			assert.Equal(t, "9999", f[2], "the dropped packet is the stranger's")
		}
		if strings.HasPrefix(f[5], "dropped by address-and-port-dependent filtering: no mapping for udp 203.0.113.100:9999 → 203.0.113.10:5555") {
			sawNoMapping = true
		}
	}
	assert.True(t, sawOnWire, "the translated packet is on the internet segment")
	assert.True(t, sawMapping, "the new mapping is annotated on the uplink")
	assert.True(t, sawDrop, "the filtered probe is annotated with the reason")
	assert.True(t, sawNoMapping, "the probe of an unmapped port is annotated with the reason")
}

// TestSegmentCaptureTracesNAT captures only the segments, as lattice-lab run
// --capture does: the internet segment's file says which frame created the
// NAT mapping and which frames the NAT dropped, and why.
func TestSegmentCaptureTracesNAT(t *testing.T) {
	ts := pcapngtest.Require(t)
	comment := ts.CommentField(t)

	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "port-restricted-cone"), 1)
	path := filepath.Join(t.TempDir(), "internet.pcapng")
	pw, err := pcapng.Create(path, pcapng.Options{})
	require.NoError(t, err)
	internet := w.f.Network("internet")
	require.NoError(t, internet.Capture(pw))

	ctx := ctxT(t, 5*time.Second)
	spc, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:3478")
	require.NoError(t, err)
	defer spc.Close()
	go udpEcho(spc)
	stranger, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:9999")
	require.NoError(t, err)
	defer stranger.Close()
	c, err := s.hosts[0].ListenPacket(ctx, "udp4", ":4000")
	require.NoError(t, err)
	defer c.Close()
	ext, _, err := roundTrip(c, netip.MustParseAddrPort("203.0.113.100:3478"), "hello", time.Second)
	require.NoError(t, err)
	_, err = stranger.WriteTo([]byte("knock"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(ext)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.router.Stats().NAT == 1 }, 2*time.Second, 5*time.Millisecond)
	internet.StopCapture()
	require.NoError(t, pw.Close())
	assert.Zero(t, internet.notes.n.Load(), "no note is left behind")

	out := ts.Run(t, "-r", path, "-Y", "frame.comment", "-T", "fields", "-E", "separator=|",
		"-e", "ip.src", "-e", "udp.srcport", "-e", "ip.dst", "-e", "udp.dstport", "-e", comment)
	t.Logf("tshark:\n%s", out)
	assert.Equal(t, []string{
		"203.0.113.10|4000|203.0.113.100|3478|nat: udp 192.168.1.2:4000 → 203.0.113.10:4000 (new mapping)",
		"203.0.113.100|9999|203.0.113.10|4000|nata/wan: dropped by address-and-port-dependent filtering: 192.168.1.2:4000 has not sent to 203.0.113.100:9999 (udp 203.0.113.100:9999 → 203.0.113.10:4000)",
	}, strings.Split(strings.TrimSpace(out), "\n"))
}

// TestSegmentCaptureNoteLostFrame: a frame that created a mapping but was
// lost on its way to the segment leaves no note behind for a later frame.
func TestSegmentCaptureNoteLostFrame(t *testing.T) {
	n := &Network{}
	lost, delivered := make([]byte, 64), make([]byte, 64)
	n.notes.hold(lost, "nat: lost")
	n.notes.hold(delivered, "nat: delivered")
	n.releaseFrame(lost)
	assert.Empty(t, n.notes.take(lost), "a released frame's note is gone")
	assert.Equal(t, "nat: delivered", n.notes.take(delivered))
	assert.Empty(t, n.notes.take(delivered), "a note is taken once")
	assert.Zero(t, n.notes.n.Load())
}

// TestCaptureTimesFromLabClock: packet timestamps are the fabric clock's,
// never the host's, so a capture made on a virtual or advanced clock lines
// up with the lab's NAT timers and repeats run after run.
func TestCaptureTimesFromLabClock(t *testing.T) {
	start := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC)
	clk := clock.NewManual(start)
	w := newWorld(t, Config{Clock: clk})
	s := w.addSite(t, profile(t, "port-restricted-cone"), 1)
	var buf bytes.Buffer
	pw, err := pcapng.NewWriter(&buf, pcapng.Options{})
	require.NoError(t, err)
	internet := w.f.Network("internet")
	require.NoError(t, internet.Capture(pw))

	ctx := ctxT(t, 5*time.Second)
	spc, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:3478")
	require.NoError(t, err)
	defer spc.Close()
	go udpEcho(spc)
	c, err := s.hosts[0].ListenPacket(ctx, "udp4", ":4000")
	require.NoError(t, err)
	defer c.Close()
	dst := netip.MustParseAddrPort("203.0.113.100:3478")
	_, _, err = roundTrip(c, dst, "before", time.Second)
	require.NoError(t, err)
	clk.Advance(90 * time.Minute)
	_, _, err = roundTrip(c, dst, "after", time.Second)
	require.NoError(t, err)
	internet.StopCapture()
	require.NoError(t, pw.Close())

	r, err := pcapng.NewReader(&buf)
	require.NoError(t, err)
	var got []time.Time
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got = append(got, p.Time.UTC())
	}
	later := start.Add(90 * time.Minute)
	assert.Equal(t, []time.Time{start, start, later, later}, got, "request and echo, before and after the clock moved")
}
