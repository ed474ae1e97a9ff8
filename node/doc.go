// Package node is a Lattice node: it registers with control, reaches every
// peer through the relay at once, upgrades to a direct ICE path when the
// NATs allow it, and runs WireGuard over whichever path each peer is on.
//
// Start builds a node from a Config whose zero values work (an ephemeral
// identity, port 51820, LRP relays over Config.Network); every program
// that runs a node goes through it. The pieces, by file:
//
//   - node.go: Config, Start and Close; start brings the pieces up in
//     order (identity, socket, relay, WireGuard, the registration's
//     peers, control session);
//     peers.go adds, updates and removes peers as control reports them;
//     peerrev.go orders what replicated control instances report by
//     registry revision.
//   - identity.go: the key pair, node ID and address, and the
//     CredentialStore that keeps them.
//   - session.go: registration and the control session (peer events,
//     signals, resync after an outage, re-registration); retry.go how
//     Start tries control again when it cannot reach it.
//   - presence.go: heartbeats, leaving, and how offline peers are kept;
//     unreachable.go answers packets for them with ICMP host unreachable.
//   - socket.go: the shared UDP socket, dual-stack on [::] where the
//     Network speaks IPv6, else udp4; the candidate families it carries.
//   - mux.go: Mux, the design's FilteringUDPMux: one UDP socket, STUN to
//     pion's UDPMux, WireGuard to the Bind, the rest counted and dropped;
//     it unmaps the IPv4-mapped sources a dual-stack socket reports.
//   - bind.go: Bind, wireguard-go's conn.Bind, a transport only: each
//     peer's endpoint is the peer, sent on its current path.
//   - handshake.go: the workarounds for WireGuard's timing that ride on
//     the Bind (handshake resends, crossing and withheld initiations,
//     receiver-index routing, stale sessions); answer.go keeps WireGuard's answer to a
//     peer's initiation apart from a handshake our own packets open.
//   - path.go: Path (a peer's current direct address and counters),
//     PathKind and PathEvent.
//   - peer.go: the per-peer actor, fed by events through mailbox.go,
//     which holds memory and runs the actor on a goroutine only while
//     events wait; it picks the path;
//     counts.go the node-wide path-switch and ICE-attempt counts;
//     peer_signal.go its side of signaling (sealing, answering,
//     adopting), signal_queue.go the queue that carries its signals to
//     control so the actor never waits on control; ice.go its ICE agents (options, attempts), signal.go the
//     sealed signals they exchange, candidates.go which host candidates
//     are offered.
//   - relay.go: the LRP relay client behind the Bind (LRPRelay).
//   - lazy.go: lazy connections (ICEConfig.Lazy): ICE only while traffic
//     flows; trim.go takes idle peers out of wireguard-go and back on
//     their first packet; early.go keeps signals from nodes not known
//     yet; srflx.go shares server-reflexive discovery between agents;
//     why.go says in words why a peer is relayed (PeerStatus.Why).
//   - batch.go (batch_linux.go): many datagrams per system call on a real
//     UDP socket (recvmmsg, sendmmsg, UDP GSO) for the Mux.
//   - liveness.go: how a direct path is found dead: consent checks while
//     idle, a watch only while it carries traffic, and the replay of the
//     last packets when the path switches; consent.go the node's own
//     consent requests on the selected pair; nopair.go the long backoff
//     for pairs that never find a pair, and the retries a change starts.
//   - probe.go: uplink probes when a direct path goes silent.
//   - status.go: PeerStatus and its assembly; statusjson.go its JSON.
//   - kernel_linux.go: KernelProvisioner, a kernel TUN device; the
//     user-space one is netstack.SandboxProvisioner.
//   - device.go: Device, the WireGuard device the node configures:
//     wireguard-go in process on the Provisioner's interface, or one with
//     its own socket fed through the Bind (DeviceOpener; wgdev's kernel
//     WireGuard and its bridge).
//   - pionlog.go: pion's logs in the node's logger, trace at Debug-4.
package node
