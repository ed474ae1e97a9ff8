package topology

import (
	"fmt"
	"net/netip"

	"github.com/latticelab/lattice/lab/nat"
)

// NAT64 in topologies: nat: nat64 on an IPv6-only network whose uplink has
// IPv4 makes the gateway a stateful NAT64 (RFC 6146). Hosts below reach
// IPv4 hosts at prefix64+a.b.c.d; the gateway's uplink IPv4 address is the
// translated flows' source. On a dual-stack uplink native IPv6 is routed
// too, filtered as under every NAT (RFC 6092).

// nat64Profile is the nat: profile that translates IPv6 to IPv4.
const nat64Profile = "nat64"

// nat64Config builds a nat64 gateway's translator, and its IPv6 filter when
// the uplink speaks IPv6, reporting misuse at path.
func (r *resolver) nat64Config(path string, n *Network, info *netInfo) (*nat.NAT64Config, *nat.StatefulConfig, string) {
	k := n.NAT
	at := path + ".nat"
	if info.prefix.Addr().Is4() {
		r.errorf(at, "drop cidr (a NAT64 network is IPv6-only), or pick a NAT profile", "nat64 translates IPv6 to IPv4, and %s has the IPv4 cidr %v", n.Name, info.prefix)
	}
	up := r.nets[info.parent]
	if up != nil && up.prefix.IsValid() && !up.prefix.Addr().Is4() {
		r.errorf(at, fmt.Sprintf("give %s a cidr", info.parent), "nat64 needs an IPv4 uplink, and %s is IPv6-only", info.parent)
	}
	if n.Firewall != nil {
		r.errorf(path+".firewall", "drop the firewall", "firewall rules filter IPv4 leaving a NAT44; nat64 takes none")
	}
	for key, set := range map[string]bool{
		"mapping": k.Mapping != "", "filtering": k.Filtering != "", "ports": k.Ports != "",
		"hairpin": k.Hairpin != nil, "refresh": k.Refresh != "",
	} {
		if set {
			r.errorf(at+"."+key, "nat64 takes port_range, the timeouts, max_mappings and prefix64",
				"nat64 maps and filters endpoint-independently (RFC 6146): %s does not apply", key)
		}
	}
	cfg := &nat.NAT64Config{
		Prefix: k.Prefix64, MaxMappings: k.MaxMappings,
		UDPTimeout: k.UDPTimeout, TCPEstablishedTimeout: k.TCPTimeout,
		TCPTransitoryTimeout: k.TCPTransitoryTimeout, ICMPTimeout: k.ICMPTimeout,
	}
	label := nat64Profile
	if k.PortRange != "" {
		var pr PortRange
		if err := pr.UnmarshalText([]byte(k.PortRange)); err != nil {
			r.errorf(at+".port_range", "", "%v", err)
		}
		cfg.PortMin, cfg.PortMax = pr.First, pr.Last
	}
	if *cfg != (nat.NAT64Config{}) {
		label += "*"
	}
	check := *cfg
	check.Public = netip.AddrFrom4([4]byte{192, 0, 2, 1}) // checked here, set by the router
	if err := check.Validate(); err != nil {
		r.errorf(at, "", "%v", err)
	}
	var fw *nat.StatefulConfig
	if up != nil && up.prefix6.IsValid() {
		fw = r.statefulConfig(at, &NAT{}) // native IPv6 is routed too: filter it as every NAT does
	}
	return cfg, fw, label
}
