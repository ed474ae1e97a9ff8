package netx

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// OS is the operating system's network: real sockets through package net.
//
// Dial and ListenPacket/Listen honour the context like net.Dialer and
// net.ListenConfig do. An empty host in a listen address binds every local
// address, as in package net; Lattice components avoid that by defaulting
// to 127.0.0.1 (see the package documentation). OS also implements Resolver
// with the system resolver, so it is the one Network that accepts host
// names.
var OS Network = osNetwork{}

// osNetwork is a zero-size value so OS can be compared and copied freely.
type osNetwork struct{}

var (
	_ Network  = osNetwork{}
	_ Resolver = osNetwork{}
)

// Dial implements Network.
func (osNetwork) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if !isStream(network) && !isPacket(network) {
		return nil, unknownNetwork("dial", network)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

// Listen implements Network.
func (osNetwork) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	if !isStream(network) {
		return nil, unknownNetwork("listen", network)
	}
	var lc net.ListenConfig
	return lc.Listen(ctx, network, address)
}

// ListenPacket implements Network.
func (osNetwork) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	if !isPacket(network) {
		return nil, unknownNetwork("listen", network)
	}
	var lc net.ListenConfig
	return lc.ListenPacket(ctx, network, address)
}

// Interfaces implements Network.
func (osNetwork) Interfaces() ([]Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("netx: interfaces: %w", err)
	}
	out := make([]Interface, 0, len(ifs))
	for i := range ifs {
		addrs, err := ifs[i].Addrs()
		if err != nil {
			return nil, fmt.Errorf("netx: addresses of %s: %w", ifs[i].Name, err)
		}
		out = append(out, Interface{
			Index:        ifs[i].Index,
			Name:         ifs[i].Name,
			MTU:          ifs[i].MTU,
			Flags:        ifs[i].Flags,
			HardwareAddr: ifs[i].HardwareAddr,
			Addrs:        prefixesOf(addrs),
		})
	}
	return out, nil
}

// LookupNetIP implements Resolver with the system resolver.
func (osNetwork) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, network, host)
}

// prefixesOf converts the addresses package net reports for an interface,
// dropping any it cannot express as a prefix.
func prefixesOf(addrs []net.Addr) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		var (
			ip   net.IP
			ones int
		)
		switch a := a.(type) {
		case *net.IPNet:
			var bits int
			ones, bits = a.Mask.Size()
			ip = a.IP
			// A 4-byte mask on a 16-byte IPv4 address (or the reverse)
			// would otherwise give a prefix length for the wrong family.
			if ip4 := ip.To4(); ip4 != nil {
				ip = ip4
				if bits == 8*net.IPv6len {
					ones -= 96
				}
			}
		case *net.IPAddr:
			ip = a.IP
			if ip4 := ip.To4(); ip4 != nil {
				ip = ip4
			}
			ones = 8 * len(ip)
		default:
			continue
		}
		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		if p := netip.PrefixFrom(addr, ones); p.IsValid() {
			out = append(out, p)
		}
	}
	return out
}

func isStream(network string) bool {
	return network == "tcp" || network == "tcp4" || network == "tcp6"
}

func isPacket(network string) bool {
	return network == "udp" || network == "udp4" || network == "udp6"
}

// unknownNetwork is the error package net returns for a network name it
// does not know, so callers see the same shape from every Network.
func unknownNetwork(op, network string) error {
	return &net.OpError{Op: op, Net: network, Err: net.UnknownNetworkError(network)}
}
