// Package iptables is the egress policy on iptables: the community
// edition's enforcer for `lattice up --egress-policy`, and the Pro
// edition's where eBPF is unavailable. One policy file, one set of
// semantics (policy.Policy.Decide), rendered as chains hooked on the
// overlay interface's egress in OUTPUT and FORWARD, for IPv4 and IPv6
// (see Render).
//
// Unlike the eBPF filter, these chains are stateful: replies on
// connections the overlay opened to this host pass. A reload replaces
// every chain of a family in one iptables-restore transaction. A crashed
// node leaves its chains in place (the policy keeps holding: fail
// closed); the next New on the interface replaces them without a gap, and
// Remove deletes them.
package iptables
