package proxy

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// SOCKS5 address types, RFC 1928 §5.
const (
	atypIPv4   byte = 0x01
	atypDomain byte = 0x03
	atypIPv6   byte = 0x04
)

// addr is a SOCKS5 destination: an IP address or an unresolved domain
// name, and a port. Exactly one of ip and name is set.
type addr struct {
	ip   netip.Addr
	name string
	port uint16
}

// String returns the address as the Dialer receives it.
func (a addr) String() string {
	host := a.name
	if a.ip.IsValid() {
		host = a.ip.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(int(a.port)))
}

// urlHost returns the host as a URL authority writes it, without port.
func (a addr) urlHost() string {
	switch {
	case a.ip.Is6():
		return "[" + a.ip.String() + "]"
	case a.ip.IsValid():
		return a.ip.String()
	}
	return a.name
}

// addrFromAddrPort converts a bound socket address; an invalid one
// becomes 0.0.0.0:0, what RFC 1928 replies carry when there is none.
func addrFromAddrPort(ap netip.AddrPort) addr {
	ip := ap.Addr().Unmap().WithZone("")
	if !ip.IsValid() {
		ip = netip.IPv4Unspecified()
	}
	return addr{ip: ip, port: ap.Port()}
}

// addrOf returns the address of a local socket for a reply's BND fields.
func addrOf(a net.Addr) addr {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	}
	return addrFromAddrPort(ap)
}

// appendAddr appends ATYP, the address and the port.
func appendAddr(b []byte, a addr) []byte {
	switch {
	case a.ip.Is4():
		b = append(b, atypIPv4)
		b = append(b, a.ip.AsSlice()...)
	case a.ip.IsValid():
		b = append(b, atypIPv6)
		b = append(b, a.ip.AsSlice()...)
	default:
		b = append(b, atypDomain, byte(len(a.name)))
		b = append(b, a.name...)
	}
	return binary.BigEndian.AppendUint16(b, a.port)
}

// addrLen returns how many bytes follow ATYP in an address of type atyp,
// given the first of them (the length of a domain name).
func addrLen(atyp, first byte) (int, error) {
	switch atyp {
	case atypIPv4:
		return net.IPv4len + 2, nil
	case atypIPv6:
		return net.IPv6len + 2, nil
	case atypDomain:
		return 1 + int(first) + 2, nil
	}
	return 0, fmt.Errorf("%w 0x%02x", errATYP, atyp)
}

// parseAddr decodes the bytes that follow ATYP, exactly addrLen of them.
func parseAddr(atyp byte, b []byte) (addr, error) {
	var first byte
	if len(b) > 0 {
		first = b[0]
	}
	n, err := addrLen(atyp, first)
	if err != nil {
		return addr{}, err
	}
	if len(b) < n {
		return addr{}, errTruncated
	}
	var a addr
	a.port = binary.BigEndian.Uint16(b[n-2 : n])
	switch atyp {
	case atypIPv4:
		a.ip = netip.AddrFrom4([4]byte(b[:4]))
	case atypIPv6:
		a.ip = netip.AddrFrom16([16]byte(b[:16])).Unmap()
	default:
		raw := string(b[1 : n-2])
		if a.ip, a.name, err = parseHost(raw); err != nil {
			a.name = raw // for Event: the destination as the client named it
		}
	}
	return a, err
}

// parseHost normalises a destination host: an IP literal becomes an
// unmapped, zone-free netip.Addr (so "::ffff:10.0.0.1" and "10.0.0.1" are
// one destination for the policy); anything else must look like a DNS
// name, and is lowercased. Refusing other characters keeps colons, brackets, percent signs
// and control bytes out of the "host:port" strings a policy parses, and
// refusing a numeric last label keeps out the forms inet_aton (and so a
// libc resolver) reads as IPv4 addresses: "2130706433", "127.1", "0x7f.1".
func parseHost(h string) (netip.Addr, string, error) {
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return netip.Addr{}, "", fmt.Errorf("%w: zone in %q", errBadHost, h)
		}
		return ip.Unmap(), "", nil
	}
	if len(h) == 0 || len(h) > 255 {
		return netip.Addr{}, "", fmt.Errorf("%w: %d-byte name", errBadHost, len(h))
	}
	for i := range len(h) {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
			return netip.Addr{}, "", fmt.Errorf("%w: %q", errBadHost, h)
		}
	}
	if numericLabel(h) {
		return netip.Addr{}, "", fmt.Errorf("%w: numeric name %q", errBadHost, h)
	}
	return netip.Addr{}, strings.ToLower(h), nil
}

// numericLabel reports whether the last label of name (ignoring a final
// dot) is decimal digits or 0x-prefixed hex. No top-level domain is.
func numericLabel(name string) bool {
	name = strings.TrimSuffix(name, ".")
	label := name[strings.LastIndexByte(name, '.')+1:]
	if len(label) >= 2 && (label[:2] == "0x" || label[:2] == "0X") {
		label = strings.TrimLeft(label[2:], "0123456789abcdefABCDEF")
		return label == ""
	}
	return label != "" && strings.TrimLeft(label, "0123456789") == ""
}
