// Package proxy implements the SOCKS5 and HTTP proxies through which a
// pod-mode sandbox gives an agent network access. The servers know nothing
// of overlays or policy: every destination goes through the Config's
// Dialer, which the sandbox supplies to route it and to apply the egress
// policy. Its errors decide what the client is told (see Dialer), and
// Config.Event reports every attempt for auditing, Config.LoginFailed every
// refused login.
//
// # Security defaults
//
// The caller chooses the listener and should bind 127.0.0.1 (or an address
// only the sandbox can reach); the package never listens on its own,
// except for the UDP relay socket of a SOCKS5 association, which is bound
// on the IP the client reached the TCP listener on. With
// Config.Credentials set, SOCKS5 offers only username/password
// authentication and the HTTP proxy requires Proxy-Authorization: Basic;
// both compare username and password in constant time (SHA-256 digests,
// so lengths do not leak) and report refusals (never the password). Every read a client can
// influence is bounded: SOCKS5 fields by their one-byte lengths and the
// whole negotiation by HandshakeTimeout, HTTP request headers by
// MaxHeaderBytes and ReadHeaderTimeout, concurrent clients by MaxConns,
// each Dial by DialTimeout. Destination hosts are normalised before the
// Dialer sees them (IPv4-mapped IPv6 unmapped; zones, odd characters and
// numeric names that libc would read as IPv4 refused), so a policy meets
// one spelling per destination.
//
// # SOCKS5 (RFC 1928, RFC 1929)
//
// Implemented: the version 5 greeting; methods 0x00 (no authentication,
// when Credentials is nil) and 0x02 (username/password, RFC 1929, when
// set), one of them offered, 0xFF if the client lacks it; CONNECT with
// ATYP IPv4, IPv6 and DOMAINNAME, names passed to the Dialer unresolved
// (what curl --socks5-hostname expects), BND.ADDR and BND.PORT the local
// address of the upstream connection (§6); UDP ASSOCIATE (§7) when
// Config.ListenPacket is set: a relay socket per association, datagrams
// accepted only from the control connection's peer IP (and one source
// port, pinned by the request or the first datagram), each destination
// dialed once through the Dialer as "udp", replies carrying the
// destination's address in their header, the association ended with its
// TCP connection.
//
// Not implemented: BIND (reply 0x07, command not supported), GSSAPI
// (method 0x01, RFC 1961) and any other method, UDP fragmentation (§7
// makes it optional: datagrams with FRAG other than 0 are dropped).
// Failure replies map errors as Dialer documents, from the errno a
// *net.OpError wraps (refused 0x05, no route 0x03, unreachable 0x04); a
// timeout is 0x06 (TTL expired), for want of a better code. A client speaking another version
// is disconnected without a reply.
//
// # HTTP
//
// Implemented: CONNECT host:port tunnels (RFC 9110 §9.3.6), answered
// "200 Connection established" once the Dialer has connected; absolute-form
// http:// requests (RFC 9112 §3.2.2), as clients send them when HTTP_PROXY
// is set, forwarded with hop-by-hop headers and Proxy-Authorization
// removed, each on its own upstream connection; 407 with
// Proxy-Authenticate: Basic realm="lattice" when credentials are missing
// or wrong; 403 with the Dialer's error text when the policy refuses. Not
// implemented: https:// in absolute form (clients use CONNECT), HTTP/2.
//
// # Lifecycle
//
// NewSOCKS5 and NewHTTP start nothing. Serve runs an accept loop on the
// caller's goroutine and may serve several listeners. Close closes the
// listeners and every client and upstream connection and waits for every
// goroutine the server started; net/http's own per-connection goroutines
// end moments later, once they see their connections closed.
package proxy
