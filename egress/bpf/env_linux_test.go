package bpf

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/internal/netns"
	"github.com/latticelab/lattice/policy"
)

// requireKernel skips unless the test can create namespaces and load BPF.
func requireKernel(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, veth pairs and BPF programs")
	}
	if !edition.Pro() {
		t.Skip("the eBPF egress filter is a Pro feature: run with -tags pro")
	}
}

var nsSeq atomic.Int32

// pair is two network namespaces joined by a veth pair: the client side
// (where the filter goes) is 10.77.N.1 and fd77:N::1 on "vc", the server
// side 10.77.N.2, .3 and 169.254.169.254, fd77:N::2 on "vs".
type pair struct {
	client, server string // /run/netns paths
	net            int
}

func (p pair) addr(host int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 77, byte(p.net), byte(host)})
}

func (p pair) addr6(host int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("fd77:%d::%d", p.net, host))
}

func newPair(t testing.TB) pair {
	t.Helper()
	n := int(nsSeq.Add(1)) + os.Getpid()%100*2
	c, s := fmt.Sprintf("lbpf%d-%dc", os.Getpid(), n), fmt.Sprintf("lbpf%d-%ds", os.Getpid(), n)
	net := n % 250
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
	run("-n", c, "addr", "add", fmt.Sprintf("10.77.%d.1/24", net), "dev", "vc")
	run("-n", c, "addr", "add", fmt.Sprintf("fd77:%d::1/64", net), "dev", "vc", "nodad")
	run("-n", c, "link", "set", "vc", "up")
	run("-n", c, "link", "set", "lo", "up")
	run("-n", c, "route", "add", "169.254.169.254/32", "dev", "vc")
	for _, a := range []string{fmt.Sprintf("10.77.%d.2/24", net), fmt.Sprintf("10.77.%d.3/24", net), "169.254.169.254/32"} {
		run("-n", s, "addr", "add", a, "dev", "vs")
	}
	run("-n", s, "addr", "add", fmt.Sprintf("fd77:%d::2/64", net), "dev", "vs", "nodad")
	run("-n", s, "link", "set", "vs", "up")
	run("-n", s, "link", "set", "lo", "up")
	// Wait until both families reach the server (neighbour discovery on
	// a link that just came up).
	for _, to := range []string{fmt.Sprintf("10.77.%d.2", net), fmt.Sprintf("fd77:%d::2", net)} {
		deadline := time.Now().Add(10 * time.Second)
		for exec.Command("ip", "netns", "exec", c, "ping", "-c1", "-W1", to).Run() != nil {
			require.False(t, time.Now().After(deadline), "%s unreachable from %s", to, c)
		}
	}
	return pair{client: "/run/netns/" + c, server: "/run/netns/" + s, net: net}
}

// in runs fn in the namespace at path.
func in(t testing.TB, path string, fn func() error) {
	t.Helper()
	require.NoError(t, netns.Do(path, fn))
}

// listenTCP listens in the server namespace on every address at port
// and accepts until the test ends, echoing what it reads.
func listenTCP(t testing.TB, p pair, port int) {
	t.Helper()
	var ln net.Listener
	in(t, p.server, func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	})
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
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

// dial connects from the client namespace; a dropped SYN shows as an
// error within timeout.
func dial(t testing.TB, p pair, network string, to netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	t.Helper()
	var c net.Conn
	var derr error
	in(t, p.client, func() error {
		c, derr = net.DialTimeout(network, to.String(), timeout)
		return nil
	})
	return c, derr
}

// canConnect reports whether a TCP connection to to opens and echoes.
func canConnect(t testing.TB, p pair, to netip.AddrPort) bool {
	t.Helper()
	c, err := dial(t, p, "tcp", to, 400*time.Millisecond)
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

// newFilter attaches a filter to the client's veth.
func newFilter(t testing.TB, p pair, cfg Config) *Filter {
	t.Helper()
	cfg.Interface = "vc"
	var f *Filter
	in(t, p.client, func() (err error) {
		f, err = New(cfg)
		return err
	})
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// mustPolicy parses a policy with the pair's addresses substituted for
// {S} (10.77.N.2), {T} (10.77.N.3) and {S6} (fd77:N::2).
func mustPolicy(t testing.TB, p pair, src string) *policy.Policy {
	t.Helper()
	src = strings.NewReplacer("{S6}", p.addr6(2).String(), "{S}", p.addr(2).String(), "{T}", p.addr(3).String()).Replace(src)
	pol, err := policy.Parse("test.yaml", []byte(src))
	require.NoError(t, err)
	return pol
}

// mountBPF mounts a private bpffs in a temporary directory.
func mountBPF(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, unix.Mount("bpffs", dir, "bpf", 0, "mode=0700"))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// The child process: attach a pinned filter and wait to be killed.
const childEnv = "LATTICE_BPF_TEST_CHILD"

// runChildIfAsked runs the child when the parent test started this
// process as one.
func runChildIfAsked() (int, bool) {
	switch {
	case os.Getenv(childEnv) != "":
		return runChild(), true
	case os.Getenv(unprivEnv) != "":
		return runUnprivChild(), true
	}
	return 0, false
}

func runChild() int {
	ns, pin, polFile := os.Getenv(childEnv), os.Getenv(childEnv+"_PIN"), os.Getenv(childEnv+"_POLICY")
	pol, err := policy.Load(polFile)
	if err == nil {
		err = netns.Do(ns, func() error {
			_, err := New(Config{Interface: "vc", Policy: pol, PinDir: pin})
			return err
		})
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("attached")
	select {}
}

// startChild runs runChild in a new process and waits until it attached.
func startChild(t *testing.T, p pair, pin, policyFile string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+p.client, childEnv+"_PIN="+pin, childEnv+"_POLICY="+policyFile)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "child: %q", line)
	require.Equal(t, "attached\n", line)
	return cmd
}

func writePolicy(t *testing.T, p pair, src string) string {
	t.Helper()
	mustPolicy(t, p, src)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	src = strings.NewReplacer("{S6}", p.addr6(2).String(), "{S}", p.addr(2).String(), "{T}", p.addr(3).String()).Replace(src)
	require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
	return path
}
