package netx

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Resolver is implemented by a Network that can turn host names into
// addresses. OS implements it with the system resolver; lab hosts do not,
// because the emulated fabric has no DNS and every address in a topology
// is an IP literal. Code that may see a name (a STUN URL, a configured
// relay host) resolves through this interface instead of package net, so
// it never leaks a real DNS query out of an emulated topology.
type Resolver interface {
	// LookupNetIP looks up host and returns its addresses, as
	// net.Resolver.LookupNetIP does. network is "ip", "ip4" or "ip6" and
	// restricts the answer to that family. It must be safe for concurrent
	// use.
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// resolveIP turns host into an address of the family that network ("ip",
// "ip4", "ip6", or a transport network whose last character gives the
// family) allows. An IP literal is parsed without any lookup; a name is
// looked up only when n implements Resolver. An empty host yields the
// invalid Addr, which callers turn into "any address" as package net does.
func resolveIP(ctx context.Context, n Network, network, host string) (netip.Addr, error) {
	family := "ip"
	switch {
	case strings.HasSuffix(network, "4"):
		family = "ip4"
	case strings.HasSuffix(network, "6"):
		family = "ip6"
	}
	if host == "" {
		return netip.Addr{}, nil
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		if !familyAllows(family, addr) {
			return netip.Addr{}, &net.AddrError{Err: "no suitable address", Addr: host}
		}
		return addr.Unmap().WithZone(addr.Zone()), nil
	}
	r, ok := n.(Resolver)
	if !ok {
		return netip.Addr{}, fmt.Errorf("netx: resolve %s %q: %w", network, host, ErrNoResolver)
	}
	addrs, err := r.LookupNetIP(ctx, family, host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("netx: resolve %s %q: %w", network, host, err)
	}
	// Like package net, prefer IPv4 when the caller accepts either family:
	// dual-stack names are common and IPv4 is the family every lab and
	// production host has.
	var found netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if !familyAllows(family, a) {
			continue
		}
		if a.Is4() {
			return a, nil
		}
		if !found.IsValid() {
			found = a
		}
	}
	if !found.IsValid() {
		return netip.Addr{}, &net.AddrError{Err: "no suitable address", Addr: host}
	}
	return found, nil
}

func familyAllows(family string, a netip.Addr) bool {
	switch family {
	case "ip4":
		return a.Unmap().Is4()
	case "ip6":
		return a.Is6() && !a.Is4In6()
	default:
		return true
	}
}

// resolveHostPort splits address into a resolved IP and a numeric port.
// Service names ("http") are rejected: nothing in Lattice uses them and
// looking them up would read the machine's /etc/services inside a lab.
func resolveHostPort(ctx context.Context, n Network, network, address string) (netip.Addr, int, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	port := 0
	if portStr != "" {
		p, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil {
			return netip.Addr{}, 0, &net.AddrError{Err: "invalid port", Addr: address}
		}
		port = int(p)
	}
	ip, err := resolveIP(ctx, n, network, host)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	return ip, port, nil
}

// ipOf returns the net.IP form of a, 4 bytes long for IPv4. gVisor's
// adapters build their address from the slice length, so a 16-byte IPv4
// address would reach a lab host as an IPv6 address.
func ipOf(a netip.Addr) net.IP {
	if !a.IsValid() {
		return nil
	}
	return net.IP(a.Unmap().AsSlice())
}
