package runner

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/lab/pcapng"
	"github.com/latticelab/lattice/lab/topology"
)

// liveLab brings up an in-process lab of two hosts behind a NAT and
// serves it on a socket in a fresh state directory.
func liveLab(t *testing.T) (*Lab, *LiveServer, string) {
	t.Helper()
	_, plan, err := topology.Parse("t.yaml", []byte(`name: t
networks:
  internet: {cidr: 203.0.113.0/24}
  home: {cidr: 192.168.1.0/24, uplink: internet, nat: symmetric}
hosts:
  server: {network: internet, addr: 203.0.113.100}
  pc: {network: home}
`))
	require.NoError(t, err)
	dir := t.TempDir()
	l, err := Up(t.Context(), Config{Plan: plan, StateDir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.Close()) })
	s, err := ServeLive(l, LiveConfig{Socket: filepath.Join(dir, LiveSocketFile), Info: LiveInfo{PID: 42, StateDir: dir}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return l, s, dir
}

func call(t *testing.T, dir string, req LiveRequest) (LiveResponse, net.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, c, err := CallLive(ctx, dir, req)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return resp, c
}

// TestLiveServer: info, do (a step that fails to parse, one that runs),
// capture of a network as pcapng, and down, over the socket.
func TestLiveServer(t *testing.T) {
	l, s, dir := liveLab(t)
	fi, err := os.Stat(filepath.Join(dir, LiveSocketFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	resp, _ := call(t, dir, LiveRequest{Op: "info"})
	require.Empty(t, resp.Error)
	require.NotNil(t, resp.Info)
	assert.Equal(t, 42, resp.Info.PID)
	assert.Equal(t, "t", resp.Info.Topology)
	require.Len(t, resp.Info.Hosts, 2)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.168.1.2")}, resp.Info.Hosts[1].Interfaces[0].Addrs)
	require.Len(t, resp.Info.Routers, 1)
	assert.Equal(t, "symmetric", resp.Info.Routers[0].NAT)

	resp, _ = call(t, dir, LiveRequest{Op: "do", Step: "link_down: {link: pcc}"})
	assert.True(t, resp.Invalid)
	assert.Contains(t, resp.Error, `do:1:19: link_down.link: no node, host, router or network "pcc"`)
	resp, _ = call(t, dir, LiveRequest{Op: "do", Step: "link_down: {link: pc}"})
	require.Empty(t, resp.Error)
	require.Len(t, resp.Lines, 2)
	assert.Equal(t, "link down pc", resp.Lines[0])
	assert.Regexp(t, `^  ✓ [0-9.]+ms$`, resp.Lines[1])
	resp, _ = call(t, dir, LiveRequest{Op: "do", Step: "link_up: {link: pc}"})
	require.Empty(t, resp.Error)
	resp, _ = call(t, dir, LiveRequest{Op: "nope"})
	assert.Equal(t, `live: unknown op "nope"`, resp.Error)

	// A capture of the internet: a datagram from pc crosses the NAT.
	resp, c := call(t, dir, LiveRequest{Op: "capture", Target: "internet"})
	require.Empty(t, resp.Error)
	busy, _ := call(t, dir, LiveRequest{Op: "capture", Target: "internet"})
	assert.Equal(t, "capture: internet is being captured by another client", busy.Error)
	bad, _ := call(t, dir, LiveRequest{Op: "capture", Target: "internett"})
	assert.Equal(t, `capture: no network or host "internett" (did you mean "internet"?)`, bad.Error)
	send(t, l)
	r, err := pcapng.NewReader(c)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	p, err := r.Next()
	require.NoError(t, err)
	assert.Greater(t, len(p.Data), 42)
	assert.Equal(t, "internet", r.Interfaces()[0].Name)
	c.Close()

	resp, _ = call(t, dir, LiveRequest{Op: "down"})
	require.Empty(t, resp.Error)
	select {
	case <-s.Down():
	case <-time.After(5 * time.Second):
		t.Fatal("down did not signal")
	}
}

// send sends UDP from pc to the server, through the NAT, until the
// capture is installed and has something to read.
func send(t *testing.T, l *Lab) {
	t.Helper()
	pc, err := l.f.Host("pc").ListenPacket(t.Context(), "udp4", ":0")
	require.NoError(t, err)
	done := make(chan struct{})
	stopped := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		<-stopped
		pc.Close()
	})
	go func() {
		defer close(stopped)
		dst := net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.100:9"))
		for {
			_, _ = pc.WriteTo([]byte("hello"), dst)
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
}

// FuzzLiveRequest: any bytes on the socket get an answer or a closed
// connection, never a panic or a hang.
func FuzzLiveRequest(f *testing.F) {
	for _, s := range []string{`{"op":"info"}`, `{"op":"do","step":"sleep: 1ms"}`, `{"op":"do","step":"join: x"}`,
		`{"op":"capture","target":"nowhere"}`, `{"op":`, "\n", `{"op":"do","step":"link_down: {link: "}`} {
		f.Add([]byte(s + "\n"))
	}
	_, plan, err := topology.Parse("t.yaml", []byte("name: t\nnetworks: {internet: {cidr: 203.0.113.0/24}}\nhosts: {a: {network: internet}}\n"))
	require.NoError(f, err)
	l, err := Up(context.Background(), Config{Plan: plan, StateDir: f.TempDir()})
	require.NoError(f, err)
	defer l.Close()
	s := &LiveServer{l: l, log: slog.New(slog.DiscardHandler), ctx: context.Background(), down: make(chan struct{}),
		location: map[string]string{}, captured: map[string]bool{}, conns: map[net.Conn]struct{}{}}
	f.Fuzz(func(t *testing.T, data []byte) {
		// A step may run for as long as it says (sleep: 1h): the
		// server's context bounds it here.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.ctx = ctx
		a, b := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer b.Close()
			s.serve(b)
		}()
		_ = a.SetDeadline(time.Now().Add(5 * time.Second))
		go func() { _, _ = a.Write(data); _, _ = a.Write([]byte("\n")) }()
		var resp LiveResponse
		_ = json.NewDecoder(a).Decode(&resp)
		a.Close()
		<-done
	})
}

// TestInfoNAT64Mappings: inspect lists a NAT64 gateway's mappings as it
// lists a NAT44's: an IPv6-only phone's UDP to an IPv4 server through
// 64:ff9b::/96 is one mapping, inside the phone's IPv6 endpoint, outside
// the gateway's IPv4 address.
func TestInfoNAT64Mappings(t *testing.T) {
	_, plan, err := topology.Parse("t.yaml", []byte(`name: t
networks:
  internet: {cidr: 203.0.113.0/24}
  mobile: {cidr6: 2001:db8:64::/64, uplink: internet, nat: nat64, public: 203.0.113.64}
hosts:
  server: {network: internet, addr: 203.0.113.100}
  phone: {network: mobile}
`))
	require.NoError(t, err)
	l, err := Up(t.Context(), Config{Plan: plan, StateDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.Close()) })

	srv, err := l.hostNet("server").ListenPacket(t.Context(), "udp", "203.0.113.100:7000")
	require.NoError(t, err)
	defer srv.Close()
	pc, err := l.hostNet("phone").ListenPacket(t.Context(), "udp", "[::]:4000")
	require.NoError(t, err)
	defer pc.Close()
	to := netip.AddrPortFrom(nat.Embed64(netip.MustParsePrefix("64:ff9b::/96"), netip.MustParseAddr("203.0.113.100")), 7000)
	_, err = pc.WriteTo([]byte("hello"), net.UDPAddrFromAddrPort(to))
	require.NoError(t, err)
	buf := make([]byte, 64)
	require.NoError(t, srv.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, from, err := srv.ReadFrom(buf)
	require.NoError(t, err, "the datagram crosses the NAT64")

	var ms []LiveMapping
	for _, r := range l.Info().Routers {
		if r.Name == "mobile-nat" {
			assert.Equal(t, "nat64", r.NAT)
			ms = r.Mappings
		}
	}
	require.Len(t, ms, 1)
	assert.Equal(t, "udp", ms[0].Proto)
	assert.Equal(t, netip.MustParseAddrPort("[2001:db8:64::2]:4000"), ms[0].Inside)
	assert.Equal(t, from.(*net.UDPAddr).AddrPort(), ms[0].External)
	assert.Equal(t, netip.MustParseAddr("203.0.113.64"), ms[0].External.Addr())
}
