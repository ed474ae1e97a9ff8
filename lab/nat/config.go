package nat

import (
	"fmt"
	"net/netip"
	"time"
)

// Defaults applied to zero Config fields.
const (
	DefaultPortMin               = 1024
	DefaultPortMax               = 65535
	DefaultUDPTimeout            = 2 * time.Minute             // RFC 4787 REQ-5 minimum
	DefaultTCPEstablishedTimeout = 2*time.Hour + 4*time.Minute // RFC 5382 REQ-5
	DefaultTCPTransitoryTimeout  = 4 * time.Minute             // RFC 5382 REQ-5 (2MSL)
	DefaultICMPTimeout           = 60 * time.Second            // RFC 5508 REQ-2
)

// Config describes a NAT. Every field but Public has a working zero value,
// which is an endpoint-independent ("full cone") NAT with port preservation,
// RFC timeouts and no firewall.
type Config struct {
	// Public is the NAT's external IPv4 address: the uplink's address.
	// Required.
	Public netip.Addr

	// Mapping decides when outbound flows share an external endpoint.
	// If zero, EndpointIndependent.
	Mapping Mapping
	// Filtering decides which remotes may send in through a mapping.
	// If zero, EndpointIndependent.
	Filtering Filtering
	// PortAllocation picks external ports. If zero, Preserve.
	PortAllocation PortAllocation
	// PortMin and PortMax bound external ports (and ICMP echo identifiers),
	// inclusive. If zero, 1024 and 65535.
	PortMin, PortMax uint16

	// Hairpin lets inside hosts reach each other through the NAT's public
	// address (RFC 4787 REQ-9). If false, such packets are dropped.
	Hairpin bool

	// UDPTimeout is how long an idle UDP mapping lives. If zero, 2m (RFC
	// 4787 REQ-5's minimum; shorter values are accepted for tests).
	UDPTimeout time.Duration
	// TCPEstablishedTimeout is how long an idle established TCP mapping
	// lives. If zero, 2h4m (RFC 5382 REQ-5).
	TCPEstablishedTimeout time.Duration
	// TCPTransitoryTimeout is how long an idle TCP mapping lives while
	// opening, after FINs in both directions, or after an RST. If zero, 4m.
	TCPTransitoryTimeout time.Duration
	// ICMPTimeout is how long an idle ICMP echo mapping lives. If zero, 60s
	// (RFC 5508 REQ-2).
	ICMPTimeout time.Duration
	// Refresh says which packets keep a mapping alive. If zero,
	// RefreshOutbound.
	Refresh Refresh

	// MaxMappings caps the live mappings across all protocols; when the
	// table is full, packets that would need a new mapping are dropped
	// with "mapping table full". If zero, unlimited.
	MaxMappings int

	// Firewall filters packets from inside before any mapping is made. If
	// zero, everything is allowed.
	Firewall Firewall

	// Seed seeds Random port allocation: two NATs with the same Config
	// given the same packets allocate the same ports. If zero, seed 0.
	Seed uint64
}

// Validate reports the first invalid field, e.g. "nat: port range 5000-4000
// is empty" or "nat: negative UDP timeout -1s". Errors match
// ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case !c.Public.IsValid():
		return invalid("public address is required")
	case !c.Public.Is4():
		return invalid(fmt.Sprintf("public address %s is not IPv4", c.Public))
	case c.Public.IsUnspecified() || c.Public.IsMulticast() || c.Public == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return invalid(fmt.Sprintf("public address %s is not a unicast address", c.Public))
	case !c.Mapping.valid():
		return invalid(fmt.Sprintf("unknown mapping behavior %d", int(c.Mapping)))
	case !c.Filtering.valid():
		return invalid(fmt.Sprintf("unknown filtering behavior %d", int(c.Filtering)))
	case !c.PortAllocation.valid():
		return invalid(fmt.Sprintf("unknown port allocation %d", int(c.PortAllocation)))
	case !c.Refresh.valid():
		return invalid(fmt.Sprintf("unknown refresh mode %d", int(c.Refresh)))
	}
	d := c.withDefaults()
	if d.PortMin > d.PortMax {
		return invalid(fmt.Sprintf("port range %d-%d is empty", d.PortMin, d.PortMax))
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{
		{"UDP timeout", c.UDPTimeout},
		{"TCP established timeout", c.TCPEstablishedTimeout},
		{"TCP transitory timeout", c.TCPTransitoryTimeout},
		{"ICMP timeout", c.ICMPTimeout},
	} {
		if t.d < 0 {
			return invalid(fmt.Sprintf("negative %s %v", t.name, t.d))
		}
	}
	if c.MaxMappings < 0 {
		return invalid(fmt.Sprintf("negative MaxMappings %d", c.MaxMappings))
	}
	return c.Firewall.Validate()
}

// withDefaults returns c with every zero field that has a default filled in.
func (c Config) withDefaults() Config {
	if c.PortMin == 0 {
		c.PortMin = DefaultPortMin
	}
	if c.PortMax == 0 {
		c.PortMax = DefaultPortMax
	}
	if c.UDPTimeout == 0 {
		c.UDPTimeout = DefaultUDPTimeout
	}
	if c.TCPEstablishedTimeout == 0 {
		c.TCPEstablishedTimeout = DefaultTCPEstablishedTimeout
	}
	if c.TCPTransitoryTimeout == 0 {
		c.TCPTransitoryTimeout = DefaultTCPTransitoryTimeout
	}
	if c.ICMPTimeout == 0 {
		c.ICMPTimeout = DefaultICMPTimeout
	}
	return c
}
