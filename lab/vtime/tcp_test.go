package vtime

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"runtime/debug"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/link"
)

// oneWay is each direction's latency between the two hosts: a 100 ms RTT.
const oneWay = 50 * time.Millisecond

// frozenAfter is how much wall time a bubble exchange may take before the
// watchdog calls the clock frozen. Healthy runs take well under a second.
const frozenAfter = 60 * time.Second

// exchange is what one run measured, in bubble (network) time.
type exchange struct {
	connect, bulk, rounds time.Duration
	sender                senderStats // the client's TCP, after the bulk transfer
}

// senderStats are the client stack's TCP counters that explain a slow
// transfer.
type senderStats struct {
	segments, retransmits, timeouts, fastRetransmits, tlp uint64
}

func statsOf(h *fabric.Host) senderStats {
	tcp := h.Stack().Stats().TCP
	return senderStats{
		segments:        tcp.SegmentsSent.Value(),
		retransmits:     tcp.Retransmits.Value(),
		timeouts:        tcp.Timeouts.Value(),
		fastRetransmits: tcp.FastRetransmit.Value(),
		tlp:             tcp.TLPRecovery.Value(),
	}
}

// fixedBuffer is the server's receive buffer when receive-buffer
// auto-tuning is off: more than 1 MiB, so the window never limits.
const fixedBuffer = 4 << 20

// runExchange builds two fabric hosts joined by a delayed link, inside the
// calling bubble, and moves bulk bytes client to server, then rounds
// 100-byte request/response rounds. With fixedWindow the server's receive
// buffer is fixedBuffer instead of auto-tuned.
func runExchange(t *testing.T, bulk, rounds int, fixedWindow bool) exchange {
	t.Helper()
	f, err := fabric.New(fabric.Config{Seed: 1})
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "wan", Prefix: netip.MustParsePrefix("198.51.100.0/24")})
	require.NoError(t, err)
	delay := link.Impairments{Latency: oneWay}
	host := func(name, addr string) *fabric.Host {
		h, err := f.AddHost(fabric.HostConfig{Name: name, Interfaces: []fabric.InterfaceConfig{
			{Network: "wan", Addr: netip.MustParseAddr(addr), Egress: delay}}})
		require.NoError(t, err)
		return h
	}
	client, server := host("client", "198.51.100.1"), host("server", "198.51.100.2")
	if fixedWindow {
		moderate := tcpip.TCPModerateReceiveBufferOption(false)
		size := tcpip.TCPReceiveBufferSizeRangeOption{Min: fixedBuffer, Default: fixedBuffer, Max: fixedBuffer}
		require.Nil(t, server.Stack().SetTransportProtocolOption(tcp.ProtocolNumber, &moderate))
		require.Nil(t, server.Stack().SetTransportProtocolOption(tcp.ProtocolNumber, &size))
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	l, err := server.Listen(ctx, "tcp", "198.51.100.2:80")
	require.NoError(t, err)
	defer l.Close()
	served := make(chan error, 1)
	go func() { served <- serve(l, bulk) }()

	var m exchange
	start := time.Now()
	c, err := client.Dial(ctx, "tcp", "198.51.100.2:80")
	require.NoError(t, err)
	defer c.Close()
	m.connect = time.Since(start)

	start = time.Now()
	_, err = c.Write(bytes.Repeat([]byte{'x'}, bulk))
	require.NoError(t, err)
	ack := make([]byte, 1)
	_, err = io.ReadFull(c, ack) // the server read it all
	require.NoError(t, err)
	m.bulk = time.Since(start)
	m.sender = statsOf(client)

	start = time.Now()
	req, resp := make([]byte, 100), make([]byte, 100)
	for i := range rounds {
		req[0] = byte(i)
		_, err = c.Write(req)
		require.NoError(t, err)
		_, err = io.ReadFull(c, resp)
		require.NoError(t, err)
		require.Equal(t, byte(i), resp[0], "round %d", i)
	}
	m.rounds = time.Since(start)
	require.NoError(t, c.Close())
	require.NoError(t, <-served)
	return m
}

// serve accepts one connection, reads bulk bytes and answers with one byte,
// then echoes 100-byte requests until the client closes.
func serve(l net.Listener, bulk int) error {
	c, err := l.Accept()
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	defer c.Close()
	if _, err := io.CopyN(io.Discard, c, int64(bulk)); err != nil {
		return fmt.Errorf("read bulk: %w", err)
	}
	if _, err := c.Write([]byte{1}); err != nil {
		return fmt.Errorf("ack bulk: %w", err)
	}
	buf := make([]byte, 100)
	for {
		if _, err := io.ReadFull(c, buf); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read request: %w", err)
		}
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("write response: %w", err)
		}
	}
}

// inBubble runs f in a synctest bubble under a wall-clock watchdog started
// outside it. A bubble whose clock froze cannot be woken from outside, so the
// watchdog panics with every goroutine's stack: a loud failure that names
// the goroutines not parked durably, instead of a hang until -timeout.
func inBubble(t *testing.T, f func(t *testing.T)) (wall time.Duration) {
	t.Helper()
	name := t.Name()
	dog := time.AfterFunc(frozenAfter, func() {
		_, why := Available()
		debug.SetTraceback("all")
		panic(fmt.Sprintf("vtime: %s: the bubble's clock froze: no progress in %v of wall time; "+
			"%d goroutines wait in gVisor's sleep not durably (%s); stacks follow",
			name, frozenAfter, plainSleepers(), why))
	})
	defer dog.Stop()
	start := time.Now()
	synctest.Test(t, f)
	return time.Since(start)
}

// plainSleepers counts goroutines parked in gVisor's pkg/sleep with a wait
// reason synctest does not count as durable.
func plainSleepers() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	count := 0
	for g := range bytes.SplitSeq(buf[:n], []byte("\n\n")) {
		if bytes.Contains(g, []byte("gvisor.dev/gvisor/pkg/sleep.")) && bytes.Contains(g, []byte(" [select")) &&
			!bytes.Contains(g, []byte(durableSelect)) {
			count++
		}
	}
	return count
}

// TestTCPExchange is the smallest check that gVisor's TCP runs on virtual
// time: over a 100 ms RTT, connecting (SYN, SYN-ACK; Dial returns as it sends
// the ACK) and one request round each take exactly one RTT of bubble time.
func TestTCPExchange(t *testing.T) {
	needShim(t)
	inBubble(t, func(t *testing.T) {
		m := runExchange(t, 1, 1, false)
		exactRTTs(t, 1, m.connect, "connect")
		exactRTTs(t, 1, m.rounds, "one round")
	})
}

// TestTCPBulkAndRounds moves 1 MiB and 60 request rounds between two gVisor
// stacks over a 100 ms RTT. In bubble time each round costs exactly one RTT
// and the bulk transfer a whole number of RTTs; in wall time the whole run
// costs a small fraction of that.
func TestTCPBulkAndRounds(t *testing.T) {
	needShim(t)
	const bulk, rounds = 1 << 20, 60
	tests := []struct {
		name        string
		fixedWindow bool
		// minBulk and maxBulk bound the 1 MiB transfer. Slow start
		// from gVisor's initial window of 10 segments needs 7 RTTs from
		// the first data to the server's reply. With receive-buffer
		// auto-tuning it takes the same 7 RTTs, plus the link's spacing
		// of a nanosecond per packet: when the link delivered a whole
		// flight at one instant, exactly an RTT after the last, gVisor's
		// tuner (which grows the buffer from the bytes the application
		// copied in the previous RTT) settled at a fixed point and the
		// transfer took 29 RTTs; see docs/VIRTUAL_TIME.md.
		minBulk, maxBulk time.Duration
	}{
		{name: "auto-tuned window", minBulk: 7 * 2 * oneWay, maxBulk: 7*2*oneWay + time.Millisecond},
		{name: "fixed window", fixedWindow: true, minBulk: 7 * 2 * oneWay, maxBulk: 7*2*oneWay + time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m exchange
			wall := inBubble(t, func(t *testing.T) { m = runExchange(t, bulk, rounds, tt.fixedWindow) })
			network := m.connect + m.bulk + m.rounds
			t.Logf("network time %v (connect %v, 1 MiB %v, %d rounds %v), wall %v, %.0fx real time; sender %+v",
				network, m.connect, m.bulk, rounds, m.rounds, wall, network.Seconds()/wall.Seconds(), m.sender)
			exactRTTs(t, 1, m.connect, "connect")
			exactRTTs(t, rounds, m.rounds, "rounds")
			assert.GreaterOrEqual(t, m.bulk, tt.minBulk, "1 MiB")
			assert.LessOrEqual(t, m.bulk, tt.maxBulk, "1 MiB")
			assert.Zero(t, m.sender.retransmits, "a lossless link needs no retransmission")
			assert.Less(t, wall, network/wallShare, "wall time")
		})
	}
}

// exactRTTs checks that got is n round trips: exactly, but for the
// link's spacing of a nanosecond between packets sent at one instant
// (lab/link), a few nanoseconds per round trip.
func exactRTTs(t *testing.T, n int, got time.Duration, what string) {
	t.Helper()
	want := time.Duration(n) * 2 * oneWay
	assert.GreaterOrEqual(t, got, want, what)
	assert.LessOrEqual(t, got, want+time.Duration(n)*10*time.Nanosecond, what)
}
