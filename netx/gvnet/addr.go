package gvnet

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"

	"github.com/latticelab/lattice/netx"
)

// endpointAddr is a parsed "host:port" for one address family; an empty
// full.Addr is every local address of the family.
type endpointAddr struct {
	full  tcpip.FullAddress
	proto tcpip.NetworkProtocolNumber
}

func (ea endpointAddr) addrPort() netip.AddrPort {
	a := unspecifiedAddr(ea.proto)
	if ea.full.Addr.BitLen() != 0 {
		a = FromTCPIP(ea.full.Addr)
	}
	return netip.AddrPortFrom(a, ea.full.Port)
}

// parseAddr resolves address for network ("tcp", "udp6", ...). The host is
// an IP literal, "localhost" or empty (every local address of the family);
// the family comes from the network's suffix, else from the host, else
// from Config.PreferIPv6.
func (n *Network) parseAddr(op, network, address string) (endpointAddr, error) {
	fail := func(err error) (endpointAddr, error) {
		return endpointAddr{}, &net.OpError{Op: op, Net: network, Err: err}
	}
	var family byte // '4', '6' or 0 for either
	switch network {
	case "tcp", "udp":
	case "tcp4", "udp4":
		family = '4'
	case "tcp6", "udp6":
		family = '6'
	default:
		return fail(net.UnknownNetworkError(network))
	}
	if family == '6' && n.cfg.IPv4Only {
		return fail(net.UnknownNetworkError(network))
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return fail(err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return fail(&net.AddrError{Err: "invalid port", Addr: address})
	}
	v6 := family == '6' || family == 0 && n.cfg.PreferIPv6 && !n.cfg.IPv4Only
	var ip netip.Addr
	switch host {
	case "":
	case "localhost":
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		if v6 {
			ip = netip.IPv6Loopback()
		}
	default:
		ip, err = netip.ParseAddr(host)
		if err != nil {
			return fail(fmt.Errorf("%q: %w", host, netx.ErrNoResolver))
		}
		ip = ip.Unmap().WithZone("")
		if family == 0 {
			v6 = ip.Is6()
		}
	}
	if ip.IsValid() && ip.Is6() != v6 {
		return fail(&net.AddrError{Err: "address family mismatch", Addr: address})
	}
	if v6 && n.cfg.IPv4Only {
		return fail(&net.AddrError{Err: "this network speaks IPv4 only", Addr: address})
	}
	ea := endpointAddr{full: tcpip.FullAddress{Port: uint16(port)}, proto: ipv4.ProtocolNumber}
	if v6 {
		ea.proto = ipv6.ProtocolNumber
	}
	if ip.IsValid() && !ip.IsUnspecified() {
		ea.full.Addr = ToTCPIP(ip)
	}
	return ea, nil
}

// ToTCPIP converts an address to gVisor's form.
func ToTCPIP(a netip.Addr) tcpip.Address {
	if a.Is4() {
		return tcpip.AddrFrom4(a.As4())
	}
	return tcpip.AddrFrom16(a.As16())
}

// FromTCPIP converts a gVisor address; an empty one is the zero netip.Addr.
func FromTCPIP(a tcpip.Address) netip.Addr {
	switch a.BitLen() {
	case 32:
		return netip.AddrFrom4(a.As4())
	case 128:
		return netip.AddrFrom16(a.As16())
	}
	return netip.Addr{}
}

func unspecifiedAddr(proto tcpip.NetworkProtocolNumber) netip.Addr {
	if proto == ipv6.ProtocolNumber {
		return netip.IPv6Unspecified()
	}
	return netip.IPv4Unspecified()
}

func unspecifiedIP(proto tcpip.NetworkProtocolNumber) net.IP {
	if proto == ipv6.ProtocolNumber {
		return net.IPv6unspecified
	}
	return net.IPv4zero.To4()
}
