// Package sandbox gives an AI agent a full Lattice network identity
// (NATS registration, ICE, the LRP relay, WireGuard) inside an isolation
// driver, the spec's "lattice sandbox":
//
//   - PodDriver (--mode pod): the overlay lives in an in-process gVisor
//     netstack (package netstack). No root, no CAP_NET_ADMIN, no
//     iptables. The agent reaches the overlay (and, when the policy
//     allows, the host's network) only through the sandbox: as an agent
//     Run starts, from user, network, mount and PID namespaces of its own
//     whose one interface leads to the sandbox's netstack.Gateway
//     (IsolationNamespace, the default); or through its SOCKS5 and HTTP
//     proxies (authenticated, on 127.0.0.1) or the Dial of the driver
//     itself. Every egress decision, proxied connection and inbound
//     forward is written to a hash-chained audit log.
//   - gvisor mode (runsc over the pod's real wg0) is a separate driver.
//
// Where egress is enforced: inside the netstack (its Config.Egress hook
// refuses a denied Dial or datagram at once, before a packet leaves, and
// a namespaced agent's TCP to a peer on its SYN, which the agent's kernel
// then carries end to end through the overlay: netstack's direct flows)
// for overlay destinations, and in the driver's dialer for destinations
// outside the overlay, which it reaches through the host network. Both
// ask the same policy. In gvisor mode the pod's kernel enforces it: the
// eBPF filter on wg0 (Pro, where BPF is available) or egress/iptables'
// chains, with iptables and ip6tables defaults on every interface
// (iptables.go, iptables_defaults.go); each connection is audited.
//
// Whatever the policy, the ranges of policy.DefaultDenied (loopback,
// unspecified, link-local, cloud metadata, their NAT64 and 6to4 forms)
// and the host's own addresses are refused unless a rule names them.
//
// The audit log is fail-closed: an event that cannot be written (a full
// disk) refuses the flow it was about, and every later one until a
// restart, unless DriverConfig.AuditFailOpen.
//
// Editions: pod mode, its proxies and the audit log are in the community
// edition. An egress policy file (--egress-policy) and inbound forwards
// (--forward) are Pro: in the community edition they fail with "<feature>
// is a Pro feature"; without a policy every destination but the
// default-denied ones is allowed.
package sandbox
