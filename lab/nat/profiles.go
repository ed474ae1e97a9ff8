package nat

import (
	"fmt"
	"strings"
)

// profiles are the named NAT types of the package documentation, in the
// order ProfileNames lists them. Public is left for the router to fill.
var profiles = []struct {
	name string
	cfg  func() Config
}{
	{"full-cone", func() Config {
		return Config{Mapping: EndpointIndependent, Filtering: EndpointIndependent, PortAllocation: Preserve, Hairpin: true}
	}},
	{"restricted-cone", func() Config {
		return Config{Mapping: EndpointIndependent, Filtering: AddressDependent, PortAllocation: Preserve, Hairpin: true}
	}},
	{"port-restricted-cone", func() Config {
		return Config{Mapping: EndpointIndependent, Filtering: AddressAndPortDependent, PortAllocation: Preserve, Hairpin: true}
	}},
	{"symmetric", func() Config {
		return Config{Mapping: AddressAndPortDependent, Filtering: AddressAndPortDependent, PortAllocation: Random}
	}},
	{"cgnat", func() Config {
		// RFC 6888: endpoint-independent mapping (REQ-1), hairpinning
		// (REQ-9), randomized ports, and a per-subscriber limit so one
		// customer cannot exhaust the shared address.
		return Config{
			Mapping:        EndpointIndependent,
			Filtering:      AddressDependent,
			PortAllocation: Random,
			PortMin:        1024,
			PortMax:        65535,
			Hairpin:        true,
			MaxMappings:    4096,
		}
	}},
	{"udp-blocked", func() Config {
		return Config{
			Mapping:        AddressAndPortDependent,
			Filtering:      AddressAndPortDependent,
			PortAllocation: Sequential,
			Firewall: Firewall{
				Rules: []Rule{
					{Action: Allow, Proto: UDP, Ports: []PortRange{Port(53)}},
					{Action: Deny, Proto: UDP},
					{Action: Allow, Proto: TCP, Ports: []PortRange{Port(80), Port(443)}},
				},
				DefaultDeny: true,
			},
		}
	}},
}

// ProfileNames lists the names Profile accepts, in documentation order.
func ProfileNames() []string {
	names := make([]string, len(profiles))
	for i, p := range profiles {
		names[i] = p.name
	}
	return names
}

// Profile returns the Config of a named NAT type (see the package
// documentation). Public is left zero: set it before calling New. An unknown
// name is an error listing the known ones.
func Profile(name string) (Config, error) {
	for _, p := range profiles {
		if p.name == name {
			return p.cfg(), nil
		}
	}
	return Config{}, invalid(fmt.Sprintf("unknown profile %q (known: %s)", name, strings.Join(ProfileNames(), ", ")))
}
