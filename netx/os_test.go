package netx_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/netx/netxtest"
)

// TestOSConformance runs the Network conformance suite on the
// operating system's loopback, once per address family the machine has.
func TestOSConformance(t *testing.T) {
	for _, tt := range []struct {
		name string
		addr netip.Addr
	}{
		{name: "ipv4", addr: netip.MustParseAddr("127.0.0.1")},
		{name: "ipv6", addr: netip.IPv6Loopback()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			requireLoopback(t, tt.addr)
			netxtest.Run(t, func(t *testing.T) netxtest.Env {
				return netxtest.Env{
					Server:     netx.OS,
					Client:     netx.OS,
					ServerAddr: tt.addr,
					ClientAddr: tt.addr,
					Blackhole:  blackhole(t, tt.addr),
				}
			})
		})
	}
}

// requireLoopback skips the test when addr cannot be bound, as ::1 cannot
// in containers with IPv6 disabled.
func requireLoopback(t *testing.T, addr netip.Addr) {
	t.Helper()
	ln, err := netx.OS.Listen(context.Background(), "tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		t.Skipf("loopback %s unavailable: %v", addr, err)
	}
	_ = ln.Close()
}

func TestOSRejectsOtherNetworks(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		call    func() error
		wantErr string
	}{
		{name: "dial unix", call: func() error {
			_, err := netx.OS.Dial(ctx, "unix", "/tmp/x.sock")
			return err
		}, wantErr: "dial unix: unknown network unix"},
		{name: "listen udp", call: func() error {
			_, err := netx.OS.Listen(ctx, "udp", "127.0.0.1:0")
			return err
		}, wantErr: "listen udp: unknown network udp"},
		{name: "listen packet tcp", call: func() error {
			_, err := netx.OS.ListenPacket(ctx, "tcp", "127.0.0.1:0")
			return err
		}, wantErr: "listen tcp: unknown network tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
