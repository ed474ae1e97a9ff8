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
//
// With Config.OnEvent, every rule that rejects (and with ReportAllowed
// every allowed conntrack-NEW packet) is preceded by an NFLOG rule whose
// prefix, "lattice:GEN:ID:V", names the table generation, the rule and
// the verdict; the Filter reads the group over netlink and hands each
// packet's addresses, ports and rule to OnEvent (AuditTo writes them to
// the audit log).
package iptables
