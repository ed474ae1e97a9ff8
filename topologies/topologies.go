// Package topologies holds the topology files lattice-lab ships, one per
// network shape people test against, embedded so the lattice-lab binary
// can run them from anywhere:
//
//	quickstart.yaml      control, relay and STUN on the internet; nodes behind a home NAT,
//	                     a symmetric office NAT and a double NAT (what lattice-lab run runs)
//	nat-matrix.yaml      a site per NAT profile with two nodes each, for the pair matrix
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
