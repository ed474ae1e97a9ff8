// Package stun is Lattice's STUN server and client: the Binding method of
// RFC 8489 and the NAT behaviour discovery of RFC 5780. Messages are
// encoded and decoded with github.com/pion/stun; this package adds the
// server, the RFC 5780 socket layout and the discovery logic.
//
// # How Lattice uses it
//
// Nodes learn their server-reflexive address (the address their NAT gives
// them) with Bind on the very socket that carries WireGuard and ICE, and the
// ICE agent gathers candidates from the same servers. Discover classifies
// the NAT a node sits behind in RFC 4787 terms, so a node can say why a peer
// is relayed. The lab runs Server on emulated hosts, on the same code paths
// as production, because every socket comes from a netx.Network.
//
// # Server
//
// Given only Config.Primary the server is a plain RFC 8489 Binding server on
// one socket. Given Config.Alternate too (a second address and a second
// port) it listens on all four combinations of address and port and
// implements RFC 5780 section 6:
//
//   - success responses carry XOR-MAPPED-ADDRESS and, as RFC 5780 section
//     6.1 asks when there is room (below), MAPPED-ADDRESS, SOFTWARE and
//     FINGERPRINT;
//   - in RFC 5780 mode also RESPONSE-ORIGIN (the socket the response leaves
//     from) and OTHER-ADDRESS (the other address and other port relative
//     to the socket the request arrived on);
//   - CHANGE-REQUEST's "change IP" and "change port" flags make the response
//     leave from the socket with the other address and/or port (RFC 5780
//     Table 1);
//   - in RFC 5780 mode RESPONSE-PORT sends the response to the request's
//     source address at that port (section 7.5: a mapping-lifetime test's
//     second socket);
//   - a request with PADDING gets PADDING back, the response then as large
//     as the request (section 6 asks for the MTU; the request bounds it,
//     see size.go).
//
// Error responses:
//
//   - 420 Unknown Attribute, with UNKNOWN-ATTRIBUTES, for comprehension-
//     required attributes the server does not understand (RFC 8489 section
//     6.3.1). CHANGE-REQUEST sent to a server without an alternate address
//     and port is one of them: RFC 5780 section 6.1 says "the server MUST
//     generate an error response of type 420" in that case, so a client
//     learns the server cannot run the filtering tests instead of timing
//     out. RESPONSE-PORT sent to a server without an alternate address
//     and port gets the same answer.
//   - 400 Bad Request for a CHANGE-REQUEST whose value is not 4 bytes, a
//     RESPONSE-PORT that is not 4 bytes or names port 0, and RESPONSE-PORT
//     together with PADDING (RFC 5780 section 6).
//
// The server understands (and, for this unauthenticated Binding usage,
// ignores) the other comprehension-required attributes RFC 8489 defines,
// such as USERNAME and MESSAGE-INTEGRITY.
//
// Everything else is dropped without an answer and counted in Stats:
// datagrams that are not STUN (too short, first two bits set, no magic
// cookie; RFC 3489 "classic STUN" requests have none and are dropped too),
// malformed messages (length field disagreeing with the datagram, broken
// attribute encoding), a FINGERPRINT that is wrong or not last (RFC 8489
// section 7.3), indications and responses, requests for methods other than
// Binding (this is not a TURN server; silence avoids one more reflection
// vector), and datagrams larger than 1500 bytes. The packet path never logs
// and never panics on any input (see FuzzHandler).
//
// # Amplification
//
// No answer is larger than its request, so a forged source address cannot
// turn the server into an amplifier (3.2× for a bare request before, 4.4×
// with the RFC 5780 attributes). Optional attributes go in while they fit,
// in the order FINGERPRINT, OTHER-ADDRESS, RESPONSE-ORIGIN, MAPPED-ADDRESS,
// SOFTWARE (Stats.Trimmed counts answers that left some out); a client that
// wants them pads its request with PADDING (RFC 5780 section 7.6), as Bind
// and Discover do. The one exception is XOR-MAPPED-ADDRESS alone (32 bytes
// for IPv4, 44 for IPv6), sent even to a smaller request, since RFC 8489
// clients such as pion/ice's gatherer send bare 20-byte requests: at most
// 1.6× (2.2× for IPv6) for those, at most 1× for anything larger. Error
// responses that cannot be made as small as the request are not sent
// (Stats.Unanswered). The server checks no credentials, so no request
// counts as authenticated and none earns a larger answer.
//
// # Client
//
// Bind performs one Binding transaction on an existing socket, with RFC 8489
// retransmissions (RTO 500 ms, doubling, 7 requests), its request padded to
// fit the mapped address and FINGERPRINT (and sent again unpadded to a
// server that refuses PADDING with 420). Discover pads for OTHER-ADDRESS
// and RESPONSE-ORIGIN too, and runs the
// mapping tests of RFC 5780 section 4.3 and the filtering tests of section
// 4.4 against an RFC 5780 server, learning the alternate address from
// OTHER-ADDRESS, and reports the result as Behavior values whose String
// forms are those of the lab's NAT package.
package stun
