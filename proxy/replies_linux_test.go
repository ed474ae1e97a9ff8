package proxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"

	"github.com/latticelab/lattice/internal/netns"
)

// TestSOCKS5RepliesFromKernelRoutes: the kernel's answers to a connect in
// a network namespace of our own, whose routes say "no route",
// "unreachable" and "prohibited". Nothing is sent: the namespace has only
// its loopback interface.
func TestSOCKS5RepliesFromKernelRoutes(t *testing.T) {
	dial := routedNamespace(t)
	runReplyCases(t, []replyCase{
		{"no route", dial, netip.MustParseAddrPort("192.0.2.1:80"), repNetworkUnreachable},
		{"unreachable route", dial, netip.MustParseAddrPort("198.51.100.1:80"), repHostUnreachable},
		{"prohibit route", dial, netip.MustParseAddrPort("203.0.113.1:80"), repNotAllowed},
	})
}

// routedNamespace makes a network namespace with an "unreachable" route
// to 198.51.100.0/24 and a "prohibit" route to 203.0.113.0/24, removed at
// cleanup, and returns a Dialer whose sockets live in it.
func routedNamespace(t *testing.T) Dialer {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2) to make a network namespace")
	}
	name := fmt.Sprintf("lattice-proxy-%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ip("-n", name, "link", "set", "lo", "up")
	ip("-n", name, "route", "add", "unreachable", "198.51.100.0/24")
	ip("-n", name, "route", "add", "prohibit", "203.0.113.0/24")
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		var c net.Conn
		err := netns.Do("/run/netns/"+name, func() (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, address)
			return err
		})
		return c, err
	}
}
