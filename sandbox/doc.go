// Package sandbox gives an AI agent a full Lattice network identity
// (NATS registration, ICE, the LRP relay, WireGuard) inside an isolation
// driver, the spec's "lattice sandbox":
//
//   - PodDriver (--mode pod): the overlay lives in an in-process gVisor
//     netstack (package netstack). No root, no CAP_NET_ADMIN, no TUN
//     device, no iptables. The agent reaches the overlay (and, when the
//     policy allows, the host's network) only through the sandbox: its
//     SOCKS5 and HTTP proxies (authenticated, on 127.0.0.1) or the Dial
//     of the driver itself. Every egress decision, proxied connection and
//     inbound forward is written to a hash-chained audit log.
//   - gvisor mode (runsc over the pod's real wg0) is a separate driver.
//
// Where egress is enforced: inside the netstack (its Config.Egress hook
// refuses a denied Dial or datagram at once, before a packet leaves) for
// overlay destinations, and in the driver's dialer for destinations
// outside the overlay, which it reaches through the host network. Both
// ask the same policy.
//
// Editions: pod mode, its proxies and the audit log are in the community
// edition. An egress policy file (--egress-policy) and inbound forwards
// (--forward) are Pro: in the community edition they fail with "<feature>
// is a Pro feature"; without a policy every destination but the cloud
// metadata service is allowed.
package sandbox
