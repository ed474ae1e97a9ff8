package nat

import (
	"fmt"
	"strconv"
	"strings"
)

// Behavior is one of RFC 4787's three dependency levels. The RFC names
// mapping behavior (section 4.1) and filtering behavior (section 5) with the
// same three terms, so Mapping and Filtering share this type and its
// constants: Config{Mapping: EndpointIndependent, Filtering: AddressDependent}
// is a "restricted cone" NAT.
type Behavior int

const (
	// EndpointIndependent is the zero value.
	//
	// As mapping: one external endpoint serves every destination of an
	// internal endpoint (RFC 4787 REQ-1).
	// As filtering: any remote endpoint may send through a mapping.
	EndpointIndependent Behavior = iota
	// AddressDependent mapping reuses an external endpoint only for
	// destinations with the same IP address. As filtering it admits only
	// remote IP addresses the internal endpoint has sent to through the
	// mapping.
	AddressDependent
	// AddressAndPortDependent mapping gives every destination IP:port its own
	// external endpoint (the "symmetric NAT" of RFC 3489). As filtering it
	// admits only remote IP:port pairs the internal endpoint has sent to
	// through the mapping.
	AddressAndPortDependent
)

// Mapping is the NAT's mapping behavior (RFC 4787 section 4.1): what decides
// whether two outbound flows from one internal endpoint share an external
// endpoint.
type Mapping = Behavior

// Filtering is the NAT's filtering behavior (RFC 4787 section 5): which
// remote endpoints may send inbound through an existing mapping.
type Filtering = Behavior

// PortAllocation is how the NAT picks the external port of a new mapping
// (RFC 4787 section 4.2.1). For ICMP echo the identifier plays the port's role.
type PortAllocation int

const (
	// Preserve keeps the internal port when it is inside the configured
	// range and free; otherwise it falls back to Sequential. Zero value.
	Preserve PortAllocation = iota
	// Sequential hands out the next free port after the last one allocated,
	// wrapping around the range.
	Sequential
	// Random picks a free port uniformly at random from the range (RFC 6056
	// style), repeatably for a given Config.Seed.
	Random
)

// Refresh says which packets extend a mapping's lifetime (RFC 4787 REQ-6).
type Refresh int

const (
	// RefreshOutbound refreshes a mapping only on inside→outside packets.
	// Zero value.
	RefreshOutbound Refresh = iota
	// RefreshBoth refreshes a mapping on permitted packets in either
	// direction.
	RefreshBoth
)

var (
	behaviorNames  = []string{"endpoint-independent", "address-dependent", "address-and-port-dependent"}
	portAllocNames = []string{"preserve", "sequential", "random"}
	refreshNames   = []string{"outbound", "both"}
)

// enumString returns names[v], or kind(v) for a value out of range.
func enumString(names []string, kind string, v int) string {
	if v >= 0 && v < len(names) {
		return names[v]
	}
	return kind + "(" + strconv.Itoa(v) + ")"
}

// parseEnum returns the index of s in names.
func parseEnum(names []string, kind, s string) (int, error) {
	for i, n := range names {
		if s == n {
			return i, nil
		}
	}
	return 0, invalid(fmt.Sprintf("unknown %s %q (want %s)", kind, s, strings.Join(names, ", ")))
}

// String returns the RFC 4787 term, e.g. "address-and-port-dependent".
func (b Behavior) String() string { return enumString(behaviorNames, "Behavior", int(b)) }

// String returns "preserve", "sequential" or "random".
func (p PortAllocation) String() string { return enumString(portAllocNames, "PortAllocation", int(p)) }

// String returns "outbound" or "both".
func (r Refresh) String() string { return enumString(refreshNames, "Refresh", int(r)) }

func (b Behavior) valid() bool       { return b >= 0 && int(b) < len(behaviorNames) }
func (p PortAllocation) valid() bool { return p >= 0 && int(p) < len(portAllocNames) }
func (r Refresh) valid() bool        { return r >= 0 && int(r) < len(refreshNames) }

// ParseMapping parses "endpoint-independent", "address-dependent" or
// "address-and-port-dependent".
func ParseMapping(s string) (Mapping, error) {
	v, err := parseEnum(behaviorNames, "mapping behavior", s)
	return Mapping(v), err
}

// ParseFiltering parses "endpoint-independent", "address-dependent" or
// "address-and-port-dependent".
func ParseFiltering(s string) (Filtering, error) {
	v, err := parseEnum(behaviorNames, "filtering behavior", s)
	return Filtering(v), err
}

// ParsePortAllocation parses "preserve", "sequential" or "random".
func ParsePortAllocation(s string) (PortAllocation, error) {
	v, err := parseEnum(portAllocNames, "port allocation", s)
	return PortAllocation(v), err
}

// ParseRefresh parses "outbound" or "both".
func ParseRefresh(s string) (Refresh, error) {
	v, err := parseEnum(refreshNames, "refresh mode", s)
	return Refresh(v), err
}

// MarshalText implements encoding.TextMarshaler with the String form.
// An out-of-range value is an error.
func (b Behavior) MarshalText() ([]byte, error) {
	if !b.valid() {
		return nil, invalid("unknown behavior " + strconv.Itoa(int(b)))
	}
	return []byte(b.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (b *Behavior) UnmarshalText(text []byte) error {
	v, err := parseEnum(behaviorNames, "behavior", string(text))
	if err != nil {
		return err
	}
	*b = Behavior(v)
	return nil
}

// MarshalText implements encoding.TextMarshaler with the String form.
// An out-of-range value is an error.
func (p PortAllocation) MarshalText() ([]byte, error) {
	if !p.valid() {
		return nil, invalid("unknown port allocation " + strconv.Itoa(int(p)))
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParsePortAllocation.
func (p *PortAllocation) UnmarshalText(b []byte) error {
	v, err := ParsePortAllocation(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// MarshalText implements encoding.TextMarshaler with the String form.
// An out-of-range value is an error.
func (r Refresh) MarshalText() ([]byte, error) {
	if !r.valid() {
		return nil, invalid("unknown refresh mode " + strconv.Itoa(int(r)))
	}
	return []byte(r.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseRefresh.
func (r *Refresh) UnmarshalText(b []byte) error {
	v, err := ParseRefresh(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}
