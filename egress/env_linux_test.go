package egress

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/internal/netns"
)

// requireRoot skips unless the test can make namespaces and run iptables.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, veth pairs, iptables and BPF")
	}
	for _, tool := range []string{"ip", "iptables", "iptables-restore", "ip6tables", "ip6tables-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
}

// backends are the backends this edition can test: iptables, and eBPF
// in the Pro edition.
func backends() []string {
	if edition.Pro() {
		return []string{EBPF, IPTables}
	}
	return []string{IPTables}
}

var nsSeq atomic.Int32

// pair is two network namespaces joined by a veth pair. The client side
// ("vc", the filtered interface) is 10.79.N.1; the server side has
// 10.79.N.2 (the peer "web"), 10.79.N.3 (the peer "db") and the metadata
// address 169.254.169.254. The overlay prefix is 10.79.N.0/24, so the
// server's addresses are overlay peers; 10.80.N.2 on the server is a
// destination outside the overlay.
type pair struct {
	client, server string // /run/netns paths
	net            int
}

func (p pair) addr(host int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 79, byte(p.net), byte(host)})
}

func (p pair) outside() netip.Addr { return netip.AddrFrom4([4]byte{10, 80, byte(p.net), 2}) }

func (p pair) overlay() netip.Prefix { return netip.PrefixFrom(p.addr(0), 24) }

func newPair(t testing.TB) pair {
	t.Helper()
	n := int(nsSeq.Add(1)) + os.Getpid()%100*2
	c, s := fmt.Sprintf("legr%d-%dc", os.Getpid(), n), fmt.Sprintf("legr%d-%ds", os.Getpid(), n)
	p := pair{client: "/run/netns/" + c, server: "/run/netns/" + s, net: n % 250}
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
	}
	run("netns", "add", c)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", c).Run() })
	run("netns", "add", s)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", s).Run() })
	run("-n", c, "link", "add", "vc", "type", "veth", "peer", "name", "vs", "netns", s)
	run("-n", c, "addr", "add", p.addr(1).String()+"/24", "dev", "vc")
	run("-n", c, "link", "set", "vc", "up")
	run("-n", c, "link", "set", "lo", "up")
	run("-n", c, "route", "add", "169.254.169.254/32", "dev", "vc")
	run("-n", c, "route", "add", p.outside().String()+"/32", "dev", "vc")
	for _, a := range []netip.Addr{p.addr(2), p.addr(3)} {
		run("-n", s, "addr", "add", a.String()+"/24", "dev", "vs")
	}
	for _, a := range []netip.Addr{netip.MustParseAddr("169.254.169.254"), p.outside()} {
		run("-n", s, "addr", "add", a.String()+"/32", "dev", "vs")
	}
	run("-n", s, "link", "set", "vs", "up")
	run("-n", s, "link", "set", "lo", "up")
	deadline := time.Now().Add(10 * time.Second)
	for exec.Command("ip", "netns", "exec", c, "ping", "-c1", "-W1", p.addr(2).String()).Run() != nil {
		require.False(t, time.Now().After(deadline), "server unreachable")
	}
	return p
}

// in runs fn in the namespace at path.
func in(t testing.TB, path string, fn func() error) {
	t.Helper()
	require.NoError(t, netns.Do(path, fn))
}

// listen accepts on every server address at port until the test ends,
// echoing what it reads.
func listen(t testing.TB, p pair, port int) {
	t.Helper()
	var ln net.Listener
	in(t, p.server, func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	})
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// dial connects from the client namespace.
func dial(t testing.TB, p pair, to netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	t.Helper()
	var c net.Conn
	var derr error
	in(t, p.client, func() error {
		c, derr = net.DialTimeout("tcp", to.String(), timeout)
		return nil
	})
	return c, derr
}

// canConnect reports whether a TCP connection to to opens and echoes.
func canConnect(t testing.TB, p pair, to netip.AddrPort) bool {
	t.Helper()
	c, err := dial(t, p, to, 500*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = c.Read(buf)
	require.NoError(t, err, "connected to %s but no echo", to)
	return true
}

// writePolicy writes src with {W} (web, 10.79.N.2) and {O} (the outside
// address) substituted and returns its path.
func writePolicy(t testing.TB, p pair, dir, src string) string {
	t.Helper()
	path := filepath.Join(dir, "policy.yaml")
	rewritePolicy(t, p, path, src)
	return path
}

// rewritePolicy replaces the file at path atomically.
func rewritePolicy(t testing.TB, p pair, path, src string) {
	t.Helper()
	src = strings.NewReplacer("{W}", p.addr(2).String(), "{O}", p.outside().String()).Replace(src)
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(src), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// mountBPF mounts a private bpffs in a temporary directory.
func mountBPF(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, unix.Mount("bpffs", dir, "bpf", 0, "mode=0700"))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// logBuffer is a slog handler's output, safe to read while written.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
