// Package topologies holds the topology files lattice-lab ships, one per
// network shape people test against, embedded so the lattice-lab binary
// can run them from anywhere:
//
//	quickstart.yaml      control, relay and STUN on the internet; nodes behind a home NAT,
//	                     a symmetric office NAT and a double NAT (what lattice-lab run runs)
//	nat-matrix.yaml      a site per NAT profile with two nodes each, for the pair matrix
//	nat-matrix6.yaml     IPv6-only sites behind RFC 6092 firewalls against a dual-stack site per
//	                     NAT profile and an IPv4-only one: the IPv6 firewall's pairs
//	dual-stack.yaml      dual-stack sites, an IPv4-only one and an IPv6-only carrier with NAT64
//	nat64-mobile.yaml    an IPv6-only phone behind NAT64 and DNS64, IPv4-only everything else
//	cgnat.yaml           home routers behind a carrier-grade NAT
//	corporate.yaml       an office that lets out only DNS and web ports
//	sandbox-pod.yaml     a pod-mode sandbox beside regular peers
//	sandbox-gvisor.yaml  a gvisor-mode sandbox in a network namespace of its own (Pro, root, runsc)
//	scale.yaml           100 lazy nodes behind 10 home NATs
//	scale-1000.yaml      1000 lazy nodes behind 100 home NATs
package topologies

import "embed"

// FS holds every topology file, by base name.
//
//go:embed *.yaml
var FS embed.FS
