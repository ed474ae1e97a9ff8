// Package topology is lattice-lab's topology file format: the network to
// emulate (segments, NAT routers, hosts, link impairments) and what runs on
// it (control with NATS, LRP relays, STUN servers, Lattice nodes and pod or
// gvisor sandboxes).
//
// A file is decoded strictly (package internal/strictyaml: unknown keys, type
// errors and values out of range are reported with file:line:col and what
// was expected) and then resolved into a Plan: counts expanded, addresses
// assigned, every network with an uplink given a gateway router with its
// NAT, routes propagated, services and nodes placed on hosts. Resolving is
// where the semantic checks live, and they report every problem at once:
// names used twice or naming nothing, addresses off their network or taken,
// uplink loops, overlapping prefixes not separated by a NAT, two services
// on one port, services a node cannot reach through its NATs.
//
// A small topology:
//
//	networks:
//	  internet: {cidr: 203.0.113.0/24}
//	  home: {cidr: 192.168.1.0/24, uplink: internet, nat: port-restricted-cone}
//	hosts:
//	  server: {network: internet, addr: 203.0.113.100}
//	control: {host: server}
//	relays: {relay: {host: server}}
//	nodes:
//	  alice: {network: home}
//	  bob: {network: internet}
//
// Schema returns the format's JSON Schema; Plan.WriteDOT and
// Plan.WriteMermaid draw a plan; Plan.AddTo builds its network on a fabric.
package topology
