// Package relay implements LRP, the Lattice Relay Protocol: a relay that
// forwards WireGuard packets between nodes that cannot reach each other
// directly, addressed by their WireGuard public keys.
//
// A Server listens on one port number for two transports: QUIC (ALPN
// "lrp/1"), where packets ride unreliable datagrams beside one control
// stream, and TLS over TCP, where everything is a length-prefixed frame on
// the stream. A Client uses the transport it is given or races the two,
// keeping TCP unless QUIC's path measures clearly faster (TCP carries more
// on a healthy path), and reconnects with jittered exponential backoff;
// Send and Recv move packets by peer key for the node's WireGuard Bind.
//
// Clients authenticate with a relay Token that control issues
// (IssueToken) and the server checks (VerifyToken) with a secret both
// share. The wire format, its limits and its failure behaviour are
// specified in docs/LRP.md; the Prometheus metrics are listed there too.
//
// Every networked piece takes a netx.Network, so the same server and
// client run on real sockets and on lab hosts inside an emulated topology.
package relay
