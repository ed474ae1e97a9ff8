// Package bpf is the kernel path of the egress policy (Pro): a TCX
// program on an interface's egress (the overlay interface for `lattice
// up`, the pod's wg0 or veth in gvisor mode) that drops what
// policy.Policy.Decide would refuse, and reports its decisions through a
// ring buffer.
//
// # One decision function
//
// compile translates a policy into an LPM trie keyed by destination
// prefix (IPv4 as IPv4-mapped IPv6, so one trie holds both). For every
// prefix any rule, default-denied range (policy.DefaultDenied), host
// address or the overlay names, the value is the list of rules Decide
// would try for an address whose longest such prefix it is, in file order,
// as (protocol, port range, verdict, rule) clauses ending in the built-in
// decision: a default range's reason, "overlay peer not named", or the
// policy's default. The program takes the longest match and the first
// clause that matches; TestCompileMatchesDecide and
// TestProgramMatchesDecide check both against Decide. peer:NAME rules
// match the addresses Config.Peers gives for NAME: the kernel sees
// addresses, so names are resolved in user space and a Reload follows
// a peer's address change. A destination is an overlay destination when
// it lies within the policy's overlay prefix.
//
// The program is written with cilium/ebpf's asm package (program.go), so
// building needs no clang. It passes non-IP frames and ICMPv6 router and
// neighbour discovery; other packets it cannot classify (IPv6 extension
// headers, protocols other than TCP, UDP and ICMP, truncated headers) are
// dropped as "invalid destination". Later IPv4 fragments are decided
// with port 0. The filter is stateless: it sees replies to inbound
// connections as egress too, so a policy for a host that serves must
// allow its clients.
//
// # Reload
//
// The trie sits in a one-slot ARRAY_OF_MAPS. Reload fills a new trie and
// swaps the slot, so every packet sees one whole table: flows both tables
// allow never drop (TestReloadUnderTraffic). A policy the table cannot
// hold (more than MaxClauses rules for one prefix, more prefixes than
// Config.MaxEntries) is refused and the old table stays.
//
// # Events
//
// Every drop, and with Config.ReportAllowed every TCP SYN (retransmissions
// within 30 s excepted, so one attempt is one event) and first UDP
// datagram of a flow that is allowed, goes to a ring buffer that one
// goroutine reads into Config.OnEvent, with the Decision.Rule string
// Decide would give. AuditTo writes them to the audit log as pod mode's
// "egress" events.
//
// # Fail closed
//
// With Config.PinDir (a bpffs directory), the link is pinned: the filter
// keeps denying after the process dies, and the next New on that
// directory replaces it without a gap. Close unpins unless
// Config.KeepPinned.
//
// # Availability
//
// In the community edition New returns "eBPF egress filter is a Pro
// feature". Where the kernel cannot load or attach the program (no
// CAP_BPF/CAP_NET_ADMIN, no TCX before Linux 6.6, not Linux) its error
// wraps ErrUnavailable, for the caller to fall back to iptables and say
// so in its log.
package bpf
