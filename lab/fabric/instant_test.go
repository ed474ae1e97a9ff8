package fabric

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/link"
	"github.com/latticelab/lattice/lab/pcapng"
	"github.com/latticelab/lattice/lab/vtime"
)

// TestInstantOrder: in a bubble, datagrams that three hosts behind three
// routers send at one instant cross the internet segment in one order,
// whatever order they were sent in, and get the same times on a link that
// spaces them (the echo server's egress has latency): the two captures are
// identical, record for record, IP IDs included. Without OrderInstants
// the send order shows on the wire, which is what makes the check able to
// fail.
func TestInstantOrder(t *testing.T) {
	if ok, why := vtime.Available(); !ok {
		t.Skip(why)
	}
	forward := sendAtOnce(t, Config{OrderInstants: true}, false)
	backward := sendAtOnce(t, Config{OrderInstants: true}, true)
	require.Len(t, forward, 6, "3 datagrams and 3 answers")
	assert.Equal(t, forward, backward, "the internet capture does not depend on the send order")

	uf := sendAtOnce(t, Config{}, false)
	ub := sendAtOnce(t, Config{}, true)
	// Unordered, the send order shows on the wire, and in the bytes too:
	// the server's stack numbers its answers' IP IDs in the order the
	// requests reached it. Under -race the runtime shuffles the order
	// runnable goroutines run in, so the unordered runs may agree by
	// chance (CI: once); the ordered ones above must agree either way.
	require.Len(t, uf, 6)
	if raceEnabled {
		t.Logf("unordered captures agree: %v (not checked under -race)", slices.Equal(uf, ub))
		return
	}
	assert.NotEqual(t, uf, ub, "unordered, the capture follows the send order")
}

// sendAtOnce builds three sites, sends one datagram from each site's host
// to an echo server from one goroutine at one instant (in site order or
// reversed), reads the answers, and returns the internet segment's
// capture records as "time data" strings.
func sendAtOnce(t *testing.T, cfg Config, reverse bool) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "internet.pcapng")
	inBubble(t, func(t *testing.T) {
		w := newWorld(t, cfg)
		for range 3 {
			w.addSite(t, profile(t, "full-cone"), 1)
		}
		// The answers leave the server 1 ns apart (link spacing), in the
		// order the requests reached it.
		require.NoError(t, w.server.FabricInterfaces()[0].SetImpairments(Egress, link.Impairments{Latency: 10 * time.Millisecond}))
		pw, err := pcapng.Create(path, pcapng.Options{Application: "lattice fabric test"})
		require.NoError(t, err)
		require.NoError(t, w.f.Network("internet").Capture(pw))
		ctx := ctxT(t, 10*time.Second)
		spc, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:7")
		require.NoError(t, err)
		go udpEcho(spc)
		var conns []net.PacketConn
		for _, s := range w.sites {
			c, err := s.hosts[0].ListenPacket(ctx, "udp4", ":4000")
			require.NoError(t, err)
			conns = append(conns, c)
		}
		time.Sleep(time.Second)
		order := []int{0, 1, 2}
		if reverse {
			slices.Reverse(order)
		}
		dst := net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.100:7"))
		for _, i := range order {
			_, err := conns[i].WriteTo(fmt.Appendf(nil, "hello from site %d", i), dst)
			require.NoError(t, err)
		}
		buf := make([]byte, 2048)
		for _, c := range conns {
			require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Second)))
			_, _, err := c.ReadFrom(buf)
			require.NoError(t, err)
			require.NoError(t, c.Close())
		}
		require.NoError(t, spc.Close())
		require.NoError(t, w.f.Close())
		require.NoError(t, pw.Close())
	})
	return captureRecords(t, path)
}

// captureRecords reads a capture's packets as "time data" strings.
func captureRecords(t *testing.T, path string) []string {
	t.Helper()
	fh, err := os.Open(path)
	require.NoError(t, err)
	defer fh.Close()
	r, err := pcapng.NewReader(fh)
	require.NoError(t, err)
	var out []string
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out = append(out, fmt.Sprintf("%s %x", p.Time.Format(time.RFC3339Nano), p.Data))
	}
}

// TestIPPairKeepsFragmentsTogether: every fragment of a datagram (only the
// first carries ports) shares a key, by the datagram's identification, and
// so does every packet of one port pair, so ordering an instant never
// reorders them; two port pairs between the same addresses (two
// connections opened at one instant), another destination or another
// protocol get keys of their own, so their order comes from the key, not
// from which goroutine sent first.
func TestIPPairKeepsFragmentsTogether(t *testing.T) {
	frame := func(proto byte, dst byte, fragOff uint16, id uint16, srcPort uint16) []byte {
		f := make([]byte, ethHeaderLen+28)
		f[12], f[13] = 0x08, 0x00
		ip := f[ethHeaderLen:]
		ip[0], ip[9] = 0x45, proto
		ip[4], ip[5] = byte(id>>8), byte(id)
		ip[6], ip[7] = byte(fragOff>>8), byte(fragOff)
		copy(ip[12:16], []byte{192, 168, 1, 2})
		copy(ip[16:20], []byte{203, 0, 113, dst})
		if fragOff&0x1fff == 0 {
			ip[20], ip[21], ip[22], ip[23] = byte(srcPort>>8), byte(srcPort), 0xca, 0x6c
		}
		return f
	}
	first := ipPair(frame(17, 100, 0x2000, 7, 4000)) // MF, offset 0
	assert.Equal(t, first, ipPair(frame(17, 100, 0x20b9, 7, 0)), "a middle fragment")
	assert.Equal(t, first, ipPair(frame(17, 100, 0x0172, 7, 0)), "the last fragment")
	assert.NotEqual(t, first, ipPair(frame(17, 100, 0x00b9, 8, 0)), "a fragment of another datagram")
	flow := ipPair(frame(6, 100, 0, 1, 4000))
	assert.Equal(t, flow, ipPair(frame(6, 100, 0, 2, 4000)), "the next segment of the connection")
	assert.NotEqual(t, flow, ipPair(frame(6, 100, 0, 1, 4001)), "another connection between the same addresses")
	assert.NotEqual(t, flow, ipPair(frame(6, 101, 0, 1, 4000)), "another destination")
	assert.NotEqual(t, flow, ipPair(frame(17, 100, 0, 1, 4000)), "another protocol")
	assert.NotPanics(t, func() { ipPair(nil); ipPair(make([]byte, 15)); ipPair(make([]byte, ethHeaderLen+20)) })
}
