package bpf

import (
	"math"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/internal/edition"
)

const basePolicy = `default: deny
rules:
  - allow: {S}
    ports: [8080]
    proto: tcp
  - allow: 169.254.169.254
  - allow: {S6}
    proto: tcp
`

// events collects a filter's events.
type events chan Event

func (ev events) on(e Event) {
	select {
	case ev <- e:
	default:
	}
}

// next waits for an event matching dst and port.
func (ev events) next(t *testing.T, dst netip.AddrPort) Event {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case e := <-ev:
			if e.Dst == dst.Addr() && e.DstPort == dst.Port() {
				return e
			}
		case <-deadline:
			t.Fatalf("no event for %s", dst)
		}
	}
}

func TestCommunityEdition(t *testing.T) {
	if edition.Pro() {
		t.Skip("Pro build: the community error is tested without -tags pro")
	}
	_, err := New(Config{Interface: "lo"})
	assert.ErrorIs(t, err, edition.ErrProFeature)
	assert.ErrorContains(t, err, "eBPF egress filter is a Pro feature")
}

func TestFilterVerdicts(t *testing.T) {
	requireKernel(t)
	p := newPair(t)
	for _, port := range []int{8080, 9090, 80} {
		listenTCP(t, p, port)
	}
	s := func(host int, port uint16) netip.AddrPort { return netip.AddrPortFrom(p.addr(host), port) }
	meta := netip.AddrPortFrom(netip.MustParseAddr("169.254.169.254"), 80)
	// Without a filter, everything connects: the denials below are the filter's.
	for _, to := range []netip.AddrPort{s(2, 8080), netip.AddrPortFrom(p.addr6(2), 8080), s(2, 9090), s(3, 8080), meta} {
		require.True(t, canConnect(t, p, to), "%s before the filter", to)
	}
	ev := make(events, 64)
	f := newFilter(t, p, Config{Policy: mustPolicy(t, p, basePolicy), OnEvent: ev.on})
	for _, tc := range []struct {
		name  string
		to    netip.AddrPort
		allow bool
		rule  string
	}{
		{"allowed", s(2, 8080), true, ""},
		{"allowed IPv6", netip.AddrPortFrom(p.addr6(2), 8080), true, ""},
		{"other port", s(2, 9090), false, "default deny"},
		{"other address", s(3, 8080), false, "default deny"},
		{"metadata despite a rule naming it", meta, false, "metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.allow, canConnect(t, p, tc.to))
			if tc.allow {
				return
			}
			e := ev.next(t, tc.to)
			assert.False(t, e.Allow)
			assert.Equal(t, tc.rule, e.Rule)
			assert.Equal(t, p.addr(1), e.Src)
			assert.Equal(t, "tcp", e.Proto.String())
			assert.NotZero(t, e.Interface)
		})
	}
	require.NoError(t, f.Close())
	assert.True(t, canConnect(t, p, s(2, 9090)), "Close detaches the filter")
	assert.ErrorIs(t, f.Reload(mustPolicy(t, p, basePolicy), nil), ErrClosed)
	assert.NoError(t, f.Close(), "Close is idempotent")
}

func TestFilterReportsAllowedConnections(t *testing.T) {
	requireKernel(t)
	p := newPair(t)
	listenTCP(t, p, 8080)
	ev := make(events, 64)
	newFilter(t, p, Config{Policy: mustPolicy(t, p, basePolicy+"  - allow: {S}\n    proto: udp\n"), OnEvent: ev.on, ReportAllowed: true})
	to := netip.AddrPortFrom(p.addr(2), 8080)
	require.True(t, canConnect(t, p, to))
	e := ev.next(t, to)
	assert.True(t, e.Allow)
	assert.Equal(t, "test.yaml:3 allow "+p.addr(2).String()+" tcp ports 8080", e.Rule)
	assert.Equal(t, uint8(0x02), e.TCPFlags)
	udp := netip.AddrPortFrom(p.addr(2), 5353)
	var srv *net.UDPConn
	in(t, p.server, func() (err error) {
		srv, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(udp))
		return err
	})
	defer srv.Close()
	c, err := dial(t, p, "udp", udp, time.Second)
	require.NoError(t, err)
	defer c.Close()
	for range 3 {
		_, err := c.Write([]byte("x"))
		require.NoError(t, err)
	}
	e = ev.next(t, udp)
	assert.True(t, e.Allow)
	assert.Equal(t, "udp", e.Proto.String())
	assert.Equal(t, "test.yaml:9 allow "+p.addr(2).String()+" udp", e.Rule)
	noMoreEvents(t, ev, to, udp)

	// The server drops SYNs: the client retransmits its SYN (after 1 s),
	// and the attempt is still one event.
	ns := p.server[strings.LastIndexByte(p.server, '/')+1:]
	drop := []string{"INPUT", "-p", "tcp", "--dport", "8080", "-j", "DROP"}
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns, "iptables", "-I"}, drop...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	_, err = dial(t, p, "tcp", to, 2500*time.Millisecond)
	require.Error(t, err, "the server drops SYNs")
	e = ev.next(t, to)
	assert.True(t, e.Allow)
	noMoreEvents(t, ev, to)
}

// noMoreEvents fails on an event to any of dsts within 200 ms: one event
// per connection or flow. Others (the link's own IPv6, MLD reports, is
// dropped and reported too) are ignored.
func noMoreEvents(t *testing.T, ev events, dsts ...netip.AddrPort) {
	t.Helper()
	quiet := time.After(200 * time.Millisecond)
	for {
		select {
		case e := <-ev:
			require.NotContains(t, dsts, netip.AddrPortFrom(e.Dst, e.DstPort), "one event per connection or flow (a retransmitted SYN is the same attempt), got another: %v", e)
		case <-quiet:
			return
		}
	}
}

// TestFilterOverlayPeerByName treats the pair's subnet as the overlay:
// peer:srv opens the server's address, another overlay address is
// "overlay peer not named", and a Reload with the peer's new address
// follows it.
func TestFilterOverlayPeerByName(t *testing.T) {
	requireKernel(t)
	p := newPair(t)
	listenTCP(t, p, 8080)
	pol := mustPolicy(t, p, "default: allow\nrules:\n  - allow: peer:SRV\n    ports: [8080]\n").
		WithOverlay(netip.PrefixFrom(p.addr(0), 24))
	ev := make(events, 16)
	f := newFilter(t, p, Config{Policy: pol, Peers: map[string][]netip.Addr{"srv": {p.addr(2)}}, OnEvent: ev.on})
	assert.True(t, canConnect(t, p, netip.AddrPortFrom(p.addr(2), 8080)), "peer:srv")
	other := netip.AddrPortFrom(p.addr(3), 8080)
	assert.False(t, canConnect(t, p, other), "an overlay address no rule names")
	assert.Equal(t, "overlay peer not named", ev.next(t, other).Rule)

	require.NoError(t, f.Reload(pol, map[string][]netip.Addr{"srv": {p.addr(3)}}))
	assert.True(t, canConnect(t, p, other), "peer:srv at its new address")
	assert.False(t, canConnect(t, p, netip.AddrPortFrom(p.addr(2), 8080)), "its old address")
}

// TestFilterAuditLog writes the filter's events into a hash-chained audit
// log: one verified line per denied connection attempt's first SYN.
func TestFilterAuditLog(t *testing.T) {
	requireKernel(t)
	p := newPair(t)
	listenTCP(t, p, 9090)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := audit.Open(path)
	require.NoError(t, err)
	ev := make(events, 16)
	sink := AuditTo(w, nil)
	f := newFilter(t, p, Config{Policy: mustPolicy(t, p, basePolicy), OnEvent: func(e Event) { sink(e); ev.on(e) }})
	denied := netip.AddrPortFrom(p.addr(3), 9090)
	c, err := dial(t, p, "tcp", denied, 200*time.Millisecond)
	if err == nil {
		c.Close()
	}
	require.Error(t, err)
	ev.next(t, denied)
	require.NoError(t, f.Close())
	require.NoError(t, w.Close())
	rep, err := audit.VerifyFile(path)
	require.NoError(t, err)
	require.GreaterOrEqual(t, rep.Lines, 1)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"kind":"egress","decision":"deny","proto":"tcp","src":"`+p.addr(1).String()+`:`)
	assert.Contains(t, string(data), `"dst":"`+denied.String()+`","rule":"default deny","detail":"kernel filter, interface `)
}

// TestMaxEntries: MaxEntries defaults to 16384 and must fit the map's
// 32-bit size, not be cut to its low 32 bits.
func TestMaxEntries(t *testing.T) {
	cfg := Config{}
	require.NoError(t, cfg.setMaxEntries())
	assert.Equal(t, 16384, cfg.MaxEntries)
	for _, n := range []int{4, math.MaxUint32} {
		cfg := Config{MaxEntries: n}
		require.NoError(t, cfg.setMaxEntries(), "MaxEntries %d", n)
		assert.Equal(t, n, cfg.MaxEntries)
	}
	cfg = Config{MaxEntries: 3}
	assert.ErrorContains(t, cfg.setMaxEntries(), "bpf: MaxEntries 3: want at least 4")
	cfg = Config{MaxEntries: 1<<32 + 64}
	assert.ErrorContains(t, cfg.setMaxEntries(), "bpf: MaxEntries 4294967360: want at most 4294967295")
}
