// Package nat is the lab's network address translator: pure logic that
// rewrites raw IPv4 packets the way a home router, a carrier-grade NAT or a
// corporate firewall would, with behavior named in the terms of RFC 4787
// (UDP), RFC 5382 (TCP) and RFC 5508 (ICMP).
//
// A router calls Process for every packet crossing its NAT'd uplink, saying
// whether it came from inside or outside. Process parses the packet, consults
// and updates the mapping table, rewrites addresses and ports in place,
// patches the IPv4, TCP, UDP and ICMP checksums incrementally (RFC 1624) and
// returns Forward or Drop with a reason. The NAT starts no goroutines and
// reads no clock: every method takes now, so tests can jump hours ahead.
//
// # Mappings
//
// An outbound packet from internal endpoint X:x to remote Y:y is sent from an
// external endpoint P:p, where P is Config.Public. The mapping X:x → P:p is
// reused for later packets according to the mapping behavior (RFC 4787
// section 4.1):
//
//	EndpointIndependent      same P:p for every Y:y (REQ-1)
//	AddressDependent         same P:p while Y is the same
//	AddressAndPortDependent  same P:p only for the same Y:y
//
// External ports are never shared between mappings of one protocol (no
// "port overloading", REQ-3), so under address-and-port-dependent mapping
// every new destination gets a new port. The port is chosen by
// Config.PortAllocation: Preserve keeps x when it is free and in range,
// Sequential and Random pick from Config.PortMin..PortMax. ICMP echo
// identifiers play the port's role.
//
// # Filtering
//
// An inbound packet from Y':y' to P:p is forwarded to X:x only if a live
// mapping holds p and the filtering behavior (RFC 4787 section 5) admits the
// sender:
//
//	EndpointIndependent      any Y':y'
//	AddressDependent         Y' if X:x has sent to Y' through this mapping
//	AddressAndPortDependent  Y':y' if X:x has sent to Y':y' through it
//
// # Lifetimes
//
// A mapping lives while now < last refresh + timeout, where the timeout
// depends on the protocol: Config.UDPTimeout, Config.ICMPTimeout, and for
// TCP Config.TCPEstablishedTimeout once SYNs have crossed in both directions,
// Config.TCPTransitoryTimeout while the connection opens, after FINs both
// ways and after an RST (RFC 5382 REQ-5). Outbound packets refresh a mapping;
// with RefreshBoth permitted inbound packets do too (RFC 4787 REQ-6). Expiry
// is lazy: an expired mapping is removed, and its port freed, when a packet
// or a port allocation next meets it, or by a periodic sweep.
//
// Only an outbound SYN creates a TCP mapping (RFC 5382 section 5). An inbound
// SYN on an existing mapping that the filter admits is forwarded, which is
// what lets TCP simultaneous open punch through endpoint-independent NATs.
// TCP state is kept per mapping, not per connection.
//
// # Hairpinning
//
// A packet from inside to P:p goes out through the sender's mapping and back
// in through the mapping holding p, filtered as if it came from outside, so
// the receiver sees the sender's external endpoint (RFC 4787 REQ-9). Process
// reports it with Result.Hairpin; the router routes it again by its new
// destination. With Config.Hairpin false such packets are dropped.
//
// # ICMP
//
// Echo requests from inside and the matching replies are translated by
// identifier. ICMP errors (destination unreachable, time exceeded, parameter
// problem) about a translated flow are translated in both directions,
// including the packet they quote (RFC 5508); they never create or refresh a
// mapping. Other ICMP types are dropped as unsupported.
//
// # Firewall
//
// Config.Firewall is a stateless, first-match-wins rule list applied to
// outbound packets before they reach the mapping table. Replies need no
// rules: what comes in is governed by mappings and filtering.
//
// # Not handled
//
// IP protocols other than TCP, UDP and ICMP, and IPv6 are dropped as
// unsupported; packets with inconsistent lengths as malformed. IPv4
// fragments are translated (the first like a whole packet, the rest by IP
// ID, see fragment.go), except those that arrive before their first.
// Process never panics on any input.
//
// # NAT64
//
// NAT64 (nat64.go) is a stateful NAT64 (RFC 6146) for IPv6-only networks:
// an IPv6 packet from inside to Prefix+a.b.c.d (RFC 6052, the well-known
// 64:ff9b::/96 by default) leaves as IPv4 to a.b.c.d from the public
// address, and replies come back as IPv6 from Prefix+their source. Headers
// are translated as RFC 7915 says: traffic class and TOS, hop limit and
// TTL, ICMPv6 echo and ICMP echo, the TCP and UDP checksums moved to the
// other pseudo-header incrementally (an IPv4 UDP datagram without a
// checksum gets one), and ICMP errors about a mapped flow with their
// quotes, Packet Too Big and "fragmentation needed" 20 bytes apart. Its
// mappings live in a NAT's tables with endpoint-independent mapping and
// filtering, random ports and the NAT's timeouts, at most MaxMappings of
// them; inbound IPv4 passes only through a mapping. Fragments in either
// family and IPv6 extension headers are dropped as unsupported.
//
// # Profiles
//
// Profile returns the Config of a named NAT type; Public is left for the
// router to fill.
//
//	profile               mapping       filtering     ports       hairpin  other
//	full-cone             endpoint-ind  endpoint-ind  preserve    on
//	restricted-cone       endpoint-ind  address       preserve    on
//	port-restricted-cone  endpoint-ind  addr+port     preserve    on
//	symmetric             addr+port     addr+port     random      off
//	cgnat                 endpoint-ind  address       random      on       ports 1024-65535, MaxMappings 4096 (RFC 6888)
//	udp-blocked           addr+port     addr+port     sequential  off      firewall: allow udp port 53, deny udp,
//	                                                                       allow tcp ports 80,443, default deny
//
// The first four are the classic RFC 3489 NAT types. cgnat is a
// carrier-grade NAT, usually placed behind a home NAT to build double-NAT
// topologies. udp-blocked is a corporate network where only DNS gets out
// over UDP and only web ports over TCP, so peers must fall back to relays
// over TCP or TLS.
package nat
