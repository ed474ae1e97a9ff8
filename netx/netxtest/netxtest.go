// Package netxtest is the conformance suite for netx.Network
// implementations. netx runs it against netx.OS; the lab runs it against
// its emulated hosts. Passing it is what lets every Lattice component treat
// the two as interchangeable.
//
// The suite uses only what the netx.Network contract promises: IP literals,
// "tcp"/"udp" networks, errors shaped like package net's. It never depends
// on the operating system, and it only sends traffic between the addresses
// the Env names.
package netxtest

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/latticelab/lattice/netx"
)

// Env is what a subtest needs: two Networks that reach each other.
type Env struct {
	// Server listens. Required.
	Server netx.Network
	// Client dials Server. It may be the same value as Server. Required.
	Client netx.Network
	// ServerAddr is an address of Server that Client reaches directly,
	// without NAT, so that Server sees Client's own address. Required.
	ServerAddr netip.Addr
	// ClientAddr is an address of Client that Server reaches directly.
	// If zero, client sockets bind the unspecified address, source
	// addresses are checked by port only, and the subtest in which the
	// server dials the client is skipped.
	ClientAddr netip.Addr
	// Blackhole is a TCP address that Client can dial and that never
	// answers, so a dial there only ends when its context does. If zero,
	// the cancellation subtest is skipped.
	Blackhole netip.AddrPort
}

// Run runs the conformance suite. setup is called once per subtest with
// that subtest's t and returns a fresh Env; it releases what it creates
// with t.Cleanup. Every goroutine the suite starts has ended when its
// subtest returns, so callers can check for leaks in TestMain.
func Run(t *testing.T, setup func(t *testing.T) Env) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, env Env)
	}{
		{"TCPEcho", testTCPEcho},
		{"ListenPortZero", testListenPortZero},
		{"DialClosedPort", testDialClosedPort},
		{"DialContextEnds", testDialContextEnds},
		{"UDPEcho", testUDPEcho},
		{"UDPDial", testUDPDial},
		{"ReadDeadline", testReadDeadline},
		{"Interfaces", testInterfaces},
		{"Concurrent", testConcurrent},
		{"CloseUnblocks", testCloseUnblocks},
		{"BadNetwork", testBadNetwork},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := setup(t)
			if env.Server == nil || env.Client == nil || !env.ServerAddr.IsValid() {
				t.Fatalf("setup returned an incomplete Env: %+v", env)
			}
			tt.run(t, env)
		})
	}
}

const (
	// opTimeout bounds every blocking step, so a broken implementation
	// fails the subtest instead of hanging the test binary.
	opTimeout = 10 * time.Second
	// promptly is how soon a refused dial or a cancelled one must end.
	promptly = 5 * time.Second
	// quiet is how long an operation must stay blocked before the test
	// unblocks it, to show that it was really waiting.
	quiet = 50 * time.Millisecond
)

// testContext returns a context that ends at opTimeout or with the test.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// hostPort is addr with port 0: "pick a free port on this address".
func hostPort(addr netip.Addr) string {
	return netip.AddrPortFrom(addr, 0).String()
}

// family returns "4" or "6", to build "tcp4", "udp6" and so on.
func family(addr netip.Addr) string {
	if addr.Unmap().Is4() {
		return "4"
	}
	return "6"
}

// clientBind is where Client sockets listen: ClientAddr when known, else
// the unspecified address of ServerAddr's family.
func clientBind(env Env) (network, address string) {
	if env.ClientAddr.IsValid() {
		return "udp", hostPort(env.ClientAddr)
	}
	return "udp" + family(env.ServerAddr), ":0"
}

// addrPort parses a net.Addr from a Network into a comparable value,
// unmapping IPv4-in-IPv6 so that dual-stack sockets compare equal to
// IPv4 ones.
func addrPort(t *testing.T, a net.Addr) netip.AddrPort {
	t.Helper()
	if a == nil {
		t.Fatalf("nil address")
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		t.Fatalf("address %q (%T) is not ip:port: %v", a.String(), a, err)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
}

// await receives from ch or fails the test after d.
func await[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: still blocked after %v", what, d)
		var zero T
		return zero
	}
}

// stillBlocked fails the test if ch delivers within quiet.
func stillBlocked[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s returned before it was unblocked: %v", what, v)
	case <-time.After(quiet):
	}
}

// closeOnCleanup closes c when the test ends, for resources whose
// explicit Close is not part of what is being tested.
func closeOnCleanup(t *testing.T, c interface{ Close() error }) {
	t.Helper()
	t.Cleanup(func() { _ = c.Close() })
}
