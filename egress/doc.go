// Package egress enforces an egress policy file on an interface's egress
// in the kernel: the overlay interface of `lattice up --egress-policy`,
// the pod's wg0 in gvisor mode. One policy format and one decision
// function (policy.Policy.Decide) drive both backends:
//
//   - egress/bpf, a TCX program whose rules sit in BPF maps (Pro);
//   - egress/iptables, iptables and ip6tables chains (the community
//     edition, and the Pro edition where BPF is unavailable: the log
//     says so).
//
// An Enforcer follows the file (policy.Watcher: on change, and on Reload
// for SIGHUP) and the overlay peers' addresses (for peer:NAME rules).
// Both backends swap a whole table at once, so flows the old and the new
// policy allow are never dropped. A file that does not parse, or that the
// kernel table cannot hold, is logged and the policy in force stays.
//
// Every denied packet (and with ReportAllowed every allowed new
// connection) goes into the hash-chained audit log as an "egress" event:
// through the eBPF program's ring buffer, or through NFLOG from iptables.
//
// # Fail closed
//
// With FailClosed the eBPF link is pinned on a bpffs (DefaultPinRoot,
// mounting bpffs on /sys/fs/bpf if needed), so a node killed with -9
// leaves its filter denying; iptables chains stay after a crash anyway.
// The next Start on the interface replaces what it finds without a gap;
// Clear (`lattice egress clear`) removes it. A clean Close removes the
// filter. The filter lives as long as the interface: a wireguard-go TUN
// goes away with its process, taking the overlay route with it.
package egress
