//go:build !linux

package netx_test

import (
	"net/netip"
	"testing"
)

// blackhole has no loopback-only implementation outside Linux; the zero
// address makes the conformance suite skip its cancellation subtest.
func blackhole(*testing.T, netip.Addr) netip.AddrPort {
	return netip.AddrPort{}
}
