package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"
)

// Dialer connects to address for network "tcp" (SOCKS5 CONNECT, HTTP) or
// "udp" (one connected socket per destination of a UDP association).
// address is a "host:port" as net.JoinHostPort builds it; host is a domain
// name, passed on unresolved (as clients like curl --socks5-hostname
// expect), an IPv4 literal or an IPv6 literal. The proxy has normalised
// it, so a policy sees one spelling per destination: names lowercased,
// IPv4-mapped IPv6 addresses unmapped; zones, names with characters
// outside [A-Za-z0-9._-] and numeric names a libc resolver would read as
// IPv4 ("2130706433", "0x7f.1") refused before any dial. ctx is bounded by
// Config.DialTimeout and cancelled by Close.
//
// The error chooses what the client is told: one wrapping ErrDenied is a
// policy refusal (SOCKS5 0x02, HTTP 403 with the error text as body), as
// is EACCES or EPERM for SOCKS5; ErrNoHost, a *net.DNSError, EHOSTUNREACH
// or EHOSTDOWN is SOCKS5 0x04 / HTTP 502; ENETUNREACH is 0x03 / 502;
// ECONNREFUSED is 0x05 / 502; a timeout is 0x06 / 504; anything else
// 0x01 / 502. Errors should wrap the syscall.Errno (as package net's and
// netstack's *net.OpError do) rather than only quote its text.
// Implementations must be safe for concurrent use.
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// PacketListener opens the datagram socket a SOCKS5 UDP association relays
// through, facing the client. network is "udp" and address an "ip:0" on the
// interface the client reached the TCP listener on, so it must be the same
// network the TCP listener lives on (netx.Network's ListenPacket method
// fits). ReadFrom must report sources, and WriteTo accept destinations, as
// *net.UDPAddr. Traffic towards destinations does not use this socket; it
// goes through the Dialer.
type PacketListener func(ctx context.Context, network, address string) (net.PacketConn, error)

// Credentials are the one username and password the proxy accepts. Both
// are compared in constant time (as SHA-256 digests, so lengths do not
// leak either).
type Credentials struct {
	// Username is 1 to 255 bytes (the RFC 1929 limit) and has no colon
	// (HTTP Basic cannot carry one).
	Username string
	// Password is 1 to 255 bytes.
	Password string
}

// Attempt describes one proxied connection attempt, for auditing.
type Attempt struct {
	// Client is the remote address of the client's TCP connection.
	Client net.Addr
	// Network is "tcp" or "udp".
	Network string
	// Address is the destination as given to the Dialer, or as the client
	// named it if it was refused before dialing.
	Address string
	// Err is nil on success, otherwise why the attempt failed.
	Err error
}

// LoginFailure describes a refused proxy login, for auditing. It never
// holds the password the client sent.
type LoginFailure struct {
	// Client is the remote address of the client's TCP connection.
	Client net.Addr
	// Username is the user the client named; empty if it sent none or the
	// message could not be read.
	Username string
	// Reason says why the login was refused, e.g. "wrong username or
	// password" or "no username/password offered".
	Reason string
}

// Reasons of a LoginFailure.
const (
	ReasonNoCredentials  = "no username/password offered"
	ReasonBadCredentials = "wrong username or password"
	ReasonMalformed      = "malformed credentials"
)

// Config configures a Server. Only Dial is required; the zero value of
// every other field is a safe default.
type Config struct {
	// Dial connects to destinations and applies the egress policy.
	// Required.
	Dial Dialer
	// ListenPacket opens the relay socket of SOCKS5 UDP associations. If
	// nil, UDP ASSOCIATE is refused with reply 0x07 (command not
	// supported). The HTTP proxy ignores it.
	ListenPacket PacketListener
	// Credentials, if set, are required from every client: SOCKS5 offers
	// only username/password authentication (RFC 1929, method 0x02) and
	// the HTTP proxy demands Proxy-Authorization: Basic. If nil, no
	// authentication (SOCKS5 method 0x00). Read once, by NewSOCKS5 or
	// NewHTTP.
	Credentials *Credentials
	// Logger receives refused authentications and denied dials at Info,
	// other failures at Debug. If nil, logs are discarded.
	Logger *slog.Logger
	// Event, if set, is called once per proxied connection attempt: each
	// CONNECT, each forwarded HTTP request's dial, each new destination of
	// a UDP association. It runs on the connection's goroutine, so it must
	// be quick, safe for concurrent use, and must not call Close.
	Event func(Attempt)
	// LoginFailed, if set, is called once per refused login when
	// Credentials are set: a SOCKS5 client that offers no username/password
	// method, sends a malformed subnegotiation or wrong credentials, an
	// HTTP request without a valid Proxy-Authorization. Like Event it runs
	// on the connection's goroutine and must be quick and concurrency-safe.
	LoginFailed func(LoginFailure)
	// HandshakeTimeout bounds a client's SOCKS5 negotiation (greeting,
	// authentication, request) or its HTTP request header. If zero, 10s.
	HandshakeTimeout time.Duration
	// DialTimeout bounds each call of Dial. If zero, 30s.
	DialTimeout time.Duration
	// MaxConns bounds concurrent client connections; a connection beyond
	// it is closed as soon as it is accepted. A UDP association counts as
	// its TCP control connection. If zero, 1024.
	MaxConns int
}

// Defaults for Config's zero fields.
const (
	defaultHandshakeTimeout = 10 * time.Second
	defaultDialTimeout      = 30 * time.Second
	defaultMaxConns         = 1024
)

func (c *Config) setDefaults() error {
	if c.Dial == nil {
		return errors.New("proxy: config: Dial is required")
	}
	if c.Credentials != nil {
		u, p := c.Credentials.Username, c.Credentials.Password
		if len(u) == 0 || len(u) > 255 || len(p) == 0 || len(p) > 255 {
			return errors.New("proxy: config: username and password must be 1 to 255 bytes")
		}
		if strings.Contains(u, ":") {
			return errors.New("proxy: config: username contains a colon")
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = defaultHandshakeTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = defaultDialTimeout
	}
	if c.MaxConns == 0 {
		c.MaxConns = defaultMaxConns
	}
	if c.HandshakeTimeout < 0 || c.DialTimeout < 0 || c.MaxConns < 0 {
		return fmt.Errorf("proxy: config: negative HandshakeTimeout %v, DialTimeout %v or MaxConns %d",
			c.HandshakeTimeout, c.DialTimeout, c.MaxConns)
	}
	return nil
}

// authenticator checks credentials in constant time. Comparing SHA-256
// digests rather than the strings keeps the time independent of both
// contents and lengths; both fields are always compared.
type authenticator struct {
	user, pass [sha256.Size]byte
}

func newAuthenticator(c *Credentials) *authenticator {
	if c == nil {
		return nil
	}
	return &authenticator{user: sha256.Sum256([]byte(c.Username)), pass: sha256.Sum256([]byte(c.Password))}
}

func (a *authenticator) match(user, pass []byte) bool {
	u, p := sha256.Sum256(user), sha256.Sum256(pass)
	return subtle.ConstantTimeCompare(u[:], a.user[:])&subtle.ConstantTimeCompare(p[:], a.pass[:]) == 1
}
