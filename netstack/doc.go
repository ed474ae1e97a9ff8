// Package netstack is pod mode's network stack: a user-space TCP/IP stack
// (gVisor's tcpip) whose only interface to the overlay is a TUNAdapter that
// wireguard-go uses as its packet device. No TUN device, no
// CAP_NET_ADMIN, no iptables: an agent in a sandbox dials and listens on
// its overlay address through Stack, which implements netx.Network.
//
//	agent → Stack (gonet, gVisor TCP/UDP/ICMP) → TUNAdapter → wireguard-go Device → Bind → peer
//
// Wiring a node:
//
//	s, err := netstack.New(netstack.Config{Address: netip.MustParsePrefix("100.64.1.2/10")})
//	dev := device.NewDevice(s.TUN(), bind, logger) // then IpcSet keys and peers, dev.Up()
//	ln, err := s.Listen(ctx, "tcp", "100.64.1.2:8080")
//	...
//	dev.Close() // closes the TUNAdapter too
//	s.Close()
//
// # Why the adapter is more than a channel
//
// wireguard-go's own tun/netstack moves one packet per Read through a
// channel, and gVisor's TCP cuts every segment to the MTU and checksums it
// itself. At a 1420-byte MTU a gigabit is some ninety thousand packets a
// second each way, and per-packet costs (gVisor's segment processing,
// goroutine hand-offs, system calls) dominate. The TUNAdapter removes them
// on both sides of the stack, as Linux's TSO and GRO do for a NIC:
//
// Outbound, the link endpoint tells gVisor it offloads segmentation ("host
// GSO", up to 64 KB) and the TCP checksum. gVisor then hands over one large
// segment where it would have sent dozens. Read cuts it into MTU-sized
// packets while copying it into wireguard-go's buffers, fixing the IP
// length, IPv4 ID and header checksum, the TCP sequence number, flags (FIN
// and PSH on the last packet, CWR on the first) and checksum of each. One
// Read returns as many packets as wireguard-go's UDP bind can send as one
// UDP GSO datagram: 45 at the default MTU (see readLimit in tun.go).
//
// Inbound, Write coalesces the consecutive in-order TCP segments of each
// flow in wireguard-go's batch into one segment (GRO; see groBatch for the
// exact rules) before handing it to gVisor, so gVisor processes and
// acknowledges one segment per batch and flow instead of one per packet.
// Each packet is copied once, out of wireguard-go's buffer; the coalesced
// packet chains those copies rather than copying them again. Everything that is not a plain in-order TCP
// segment is delivered as it came, in order.
//
// Checksums: gVisor trusts the checksums of what Write delivers, because
// every such packet was authenticated by WireGuard's ChaCha20-Poly1305, a
// far stronger check; Linux's WireGuard marks decrypted packets
// CHECKSUM_UNNECESSARY for the same reason. The adapter still keeps them
// right: a coalesced segment's checksum is derived from its members' so it
// verifies exactly when theirs did (barring errors that cancel). Outbound
// checksums are always computed, since the peer may check them.
//
// # An agent's link: Gateway and direct flows
//
// A Gateway (gateway_linux.go) is the far end of a pod agent's TUN
// device: a second gVisor stack that terminates the agent's flows and
// hands each to a Dial. Given GatewayConfig.Overlay, the agent's TCP to
// overlay peers skips it (direct.go, direct_linux.go): after the overlay
// stack's egress hook allows the SYN, the flow's packets go from the
// agent's link into the TUNAdapter's outbound queue as GSO segments (the
// TUN device hands over 64 KB segments with a virtio_net_hdr; Read cuts
// them like gVisor's), and Write diverts the peer's packets of the flow
// (and ICMP errors about it) to the agent's link, coalesced, before gVisor
// sees them. The agent's kernel TCP and the peer's talk end to end. Each
// flow reserves its overlay-side tuple in the overlay stack's port
// manager, so the stack's own connections, listeners and other agents'
// flows never share it; an agent port in use there is translated.
//
//	agent TCP → TUN (TSO) → Gateway filter → TUNAdapter queue → Read (cut) → wireguard-go → peer
//	peer → wireguard-go → Write (divert, GRO) → agent's TUN
//
// TCP is tuned like Linux: SACK, CUBIC, receive buffer moderation, and
// buffer ranges of net.ipv4.tcp_rmem and tcp_wmem that auto-tuning grows
// to 6 MB (receive) and 4 MB (send).
//
// # Goroutines
//
// The adapter starts none: Read and Write run on wireguard-go's goroutines,
// and gVisor's processing of a delivered segment continues on gVisor's. The
// gVisor stack's goroutines (TCP processors and timers) stop in
// Stack.Close, which waits for them.
//
// # Performance
//
// BenchmarkDataPath measures TCP over two WireGuard devices on loopback
// with this adapter ("pod"), with wireguard-go's tun/netstack
// ("wgnetstack") and, as root, with wireguard-go on kernel TUN devices in
// two network namespaces ("kernel").
package netstack
