package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testTimeout bounds every blocking step of a test.
const testTimeout = 5 * time.Second

var testCreds = &Credentials{Username: "agent", Password: "s3cret"}

// testNet is the tests' Dialer. Some names fail in set ways; others are
// mapped to loopback addresses (hosts) and dialed for real. Nothing but
// loopback is ever dialed.
type testNet struct {
	hosts    map[string]string // host the client names -> loopback IP dialed
	redirect map[string]string // address the client names -> address dialed

	mu       sync.Mutex     // guards the following
	dialed   []string       // "network address" per call
	attempts []Attempt      // from Config.Event
	logins   []LoginFailure // from Config.LoginFailed
}

func newTestNet() *testNet {
	return &testNet{hosts: map[string]string{
		"some-name":   "127.0.0.1",
		"echo-name":   "127.0.0.1",
		"udp-name":    "127.0.0.1",
		"2001:db8::1": "127.0.0.1",
	}}
}

func (n *testNet) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	n.mu.Lock()
	n.dialed = append(n.dialed, network+" "+address)
	to, ok := n.redirect[address]
	n.mu.Unlock()
	if ok {
		address = to
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	switch host {
	case "denied.test":
		return nil, fmt.Errorf("test policy refuses %s: %w", address, ErrDenied)
	case "nohost.test":
		return nil, fmt.Errorf("lookup %s: %w", host, ErrNoHost)
	case "timeout.test":
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.ErrDeadlineExceeded}
	case "slow.test":
		<-ctx.Done()
		return nil, ctx.Err()
	case "boom.test":
		return nil, errors.New("boom")
	}
	if mapped, ok := n.hosts[host]; ok {
		host = mapped
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("test net: %s: %w", address, ErrNoHost)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, net.JoinHostPort(host, port))
}

func (n *testNet) event(a Attempt) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.attempts = append(n.attempts, a)
}

func (n *testNet) loginFailed(f LoginFailure) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.logins = append(n.logins, f)
}

func (n *testNet) LoginFailures() []LoginFailure {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.logins)
}

func (n *testNet) Dialed() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.dialed)
}

func (n *testNet) Attempts() []Attempt {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.attempts)
}

// config returns a Config dialing through n, with Event recorded and
// UDP associations on loopback sockets.
func (n *testNet) config(creds *Credentials) Config {
	var lc net.ListenConfig
	return Config{
		Dial:         n.Dial,
		ListenPacket: lc.ListenPacket,
		Credentials:  creds,
		Event:        n.event,
		LoginFailed:  n.loginFailed,
		DialTimeout:  500 * time.Millisecond,
	}
}

// listen returns a loopback TCP listener closed at cleanup.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// serve runs s on a loopback listener and returns its address; cleanup
// closes s and checks that Serve returned ErrClosed.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ln := listen(t)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		select {
		case err := <-done:
			require.ErrorIs(t, err, ErrClosed)
		case <-time.After(testTimeout):
			t.Error("Serve did not return after Close")
		}
	})
	return ln.Addr().String()
}

func startSOCKS(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s, err := NewSOCKS5(cfg)
	require.NoError(t, err)
	return s, serve(t, s)
}

func startHTTP(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s, err := NewHTTP(cfg)
	require.NoError(t, err)
	return s, serve(t, s)
}

// goAll runs fs on goroutines that cleanup waits for.
func goAll(t *testing.T, fs ...func()) {
	t.Helper()
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Go(f)
	}
	t.Cleanup(wg.Wait)
}

// tcpServer runs handle for each connection to a loopback listener and
// returns its address and the remote addresses it saw. Cleanup closes the
// listener and waits for the handlers.
func tcpServer(t *testing.T, handle func(net.Conn)) (string, <-chan net.Addr) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	peers := make(chan net.Addr, 64)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case peers <- c.RemoteAddr():
			default:
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(testTimeout))
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), peers
}

// echo copies a connection back to itself and half-closes when done.
func echo(c net.Conn) {
	_, _ = io.Copy(c, c)
	_ = c.(*net.TCPConn).CloseWrite()
}

// udpEcho runs a loopback UDP echo server and returns its address and
// the payloads it received.
func udpEcho(t *testing.T) (*net.UDPAddr, <-chan []byte) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	got := make(chan []byte, 64)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, maxDatagram)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			select {
			case got <- bytes.Clone(buf[:n]):
			default:
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	})
	t.Cleanup(func() {
		_ = pc.Close()
		wg.Wait()
	})
	return pc.LocalAddr().(*net.UDPAddr), got
}

// dial connects to a proxy with a deadline on every step.
func dial(t *testing.T, address string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", address, testTimeout)
	require.NoError(t, err)
	require.NoError(t, c.SetDeadline(time.Now().Add(testTimeout)))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// SOCKS5 destinations as raw ATYP, address and port.
func ipDst(ip string, port int) []byte {
	a := netip.MustParseAddr(ip)
	atyp := atypIPv6
	if a.Is4() {
		atyp = atypIPv4
	}
	return binary.BigEndian.AppendUint16(append([]byte{atyp}, a.AsSlice()...), uint16(port))
}

func nameDst(name string, port int) []byte {
	b := append([]byte{atypDomain, byte(len(name))}, name...)
	return binary.BigEndian.AppendUint16(b, uint16(port))
}

func portOf(t *testing.T, address string) int {
	t.Helper()
	ap, err := netip.ParseAddrPort(address)
	require.NoError(t, err)
	return int(ap.Port())
}

// socksGreet negotiates a method, authenticating if creds is set, and
// requires success.
func socksGreet(t *testing.T, c net.Conn, creds *Credentials) {
	t.Helper()
	if creds == nil {
		_, err := c.Write([]byte{5, 1, 0})
		require.NoError(t, err)
		requireRead(t, c, []byte{5, 0})
		return
	}
	msg := []byte{5, 1, 2, 1, byte(len(creds.Username))}
	msg = append(msg, creds.Username...)
	msg = append(append(msg, byte(len(creds.Password))), creds.Password...)
	_, err := c.Write(msg)
	require.NoError(t, err)
	requireRead(t, c, []byte{5, 2, 1, 0})
}

// socksRequest sends a request and returns the reply code and BND.
func socksRequest(t *testing.T, c net.Conn, cmd byte, dst []byte) (byte, addr) {
	t.Helper()
	_, err := c.Write(append([]byte{5, cmd, 0}, dst...))
	require.NoError(t, err)
	// A reply has the shape of a request, REP in the place of CMD.
	rep, bnd, err := readRequest(c)
	require.NoError(t, err)
	return rep, bnd
}

// socksConnect opens a CONNECT through the proxy at address.
func socksConnect(t *testing.T, address string, creds *Credentials, dst []byte) (net.Conn, byte, addr) {
	t.Helper()
	c := dial(t, address)
	socksGreet(t, c, creds)
	rep, bnd := socksRequest(t, c, cmdConnect, dst)
	return c, rep, bnd
}

func requireRead(t *testing.T, r io.Reader, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	_, err := io.ReadFull(r, got)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// eventually polls cond until it holds or the test timeout passes.
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, testTimeout, 10*time.Millisecond, msg)
}

func itoa(i int) string { return strconv.Itoa(i) }

// logBuf collects a server's logs, in text form, for assertions.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// refusedAddr is a loopback address that refuses connections for the
// whole test: a TCP socket bound to it but not listening holds the port.
// (A closed listener's port can be taken meanwhile by a test running
// beside, and then the dial hangs instead of being refused.)
func refusedAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	port := sa.(*syscall.SockaddrInet4).Port
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port)).String()
}
