package proxy

import (
	"context"
	"errors"
	"net"
	"syscall"
)

// Sentinel errors. A Dialer wraps ErrDenied or ErrNoHost to choose the
// failure a client sees; see Dialer.
var (
	// ErrDenied reports a destination the egress policy refuses. Clients
	// see SOCKS5 reply 0x02 (connection not allowed by ruleset) or HTTP 403.
	ErrDenied = errors.New("proxy: destination denied by policy")
	// ErrNoHost reports a destination that does not exist: a name that
	// does not resolve or an address nothing routes to. Clients see
	// SOCKS5 reply 0x04 (host unreachable) or HTTP 502.
	ErrNoHost = errors.New("proxy: no such host")
	// ErrClosed is returned by Serve once Close has been called.
	ErrClosed = errors.New("proxy: server closed")
)

// Package-internal failures of a SOCKS5 client's messages.
var (
	errVersion   = errors.New("proxy: not a socks5 client")
	errMethod    = errors.New("proxy: no acceptable socks5 authentication method")
	errAuth      = errors.New("proxy: socks5 authentication refused")
	errTruncated = errors.New("proxy: truncated socks5 message")
	errATYP      = errors.New("proxy: unsupported socks5 address type")
	errBadHost   = errors.New("proxy: malformed destination host")
	errFragment  = errors.New("proxy: fragmented socks5 datagram")
)

// SOCKS5 reply codes, RFC 1928 §6.
const (
	repSucceeded           byte = 0x00
	repGeneralFailure      byte = 0x01
	repNotAllowed          byte = 0x02
	repNetworkUnreachable  byte = 0x03
	repHostUnreachable     byte = 0x04
	repConnectionRefused   byte = 0x05
	repTTLExpired          byte = 0x06
	repCommandNotSupported byte = 0x07
	repATYPNotSupported    byte = 0x08
)

// replyCode maps a dial or parse error to the SOCKS5 reply a client sees.
// A timeout is reported as 0x06 (TTL expired), the code Tor and other
// proxies use for "timed out": RFC 1928 has no better one. EACCES and
// EPERM from connect are the host's own rules refusing the flow (a
// prohibit route, a netfilter DROP on output), so 0x02 as for our policy.
func replyCode(err error) byte {
	var dnsErr *net.DNSError
	switch {
	case err == nil:
		return repSucceeded
	case errors.Is(err, ErrDenied), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return repNotAllowed
	case errors.Is(err, errATYP):
		return repATYPNotSupported
	case errors.Is(err, ErrNoHost), errors.Is(err, errBadHost),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.EHOSTDOWN),
		errors.As(err, &dnsErr) && !dnsErr.IsTimeout:
		return repHostUnreachable
	case errors.Is(err, syscall.ENETUNREACH):
		return repNetworkUnreachable
	case errors.Is(err, syscall.ECONNREFUSED):
		return repConnectionRefused
	case isTimeout(err):
		return repTTLExpired
	default:
		return repGeneralFailure
	}
}

// isTimeout reports a deadline expiry, whether from a context or a socket.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// isTemporaryAccept reports an Accept error worth retrying after a pause
// (out of file descriptors, a connection reset before it was accepted)
// rather than ending Serve.
func isTemporaryAccept(err error) bool {
	var ne net.Error
	return errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EMFILE) ||
		errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) ||
		errors.Is(err, syscall.ENOMEM) || errors.As(err, &ne) && ne.Timeout()
}
