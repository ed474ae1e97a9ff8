package stun

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error this package returns wraps one of these, a
// *ErrorResponse, or an error from the network or the context.
var (
	// ErrInvalidConfig is wrapped by every error NewServer returns.
	ErrInvalidConfig = errors.New("stun: invalid config")
	// ErrClosed is returned by Start on a server that has been closed.
	ErrClosed = errors.New("stun: server closed")
	// ErrNoResponse means a request went unanswered through every
	// retransmission: the server is down, unreachable, or UDP is blocked on
	// the way. When the context ended first the error wraps its error too.
	ErrNoResponse = errors.New("stun: no response from server")
	// ErrNoOtherAddress means the server answered without OTHER-ADDRESS, so
	// it does not support RFC 5780 and cannot classify a NAT.
	ErrNoOtherAddress = errors.New("stun: server does not support RFC 5780 (no OTHER-ADDRESS)")
	// ErrBadResponse means a response carrying our transaction ID was not
	// what RFC 8489 or RFC 5780 promise: no mapped address, an unexpected
	// method, an OTHER-ADDRESS that names no other endpoint, or an answer
	// to CHANGE-REQUEST from the wrong address.
	ErrBadResponse = errors.New("stun: bad response")
)

// ErrorResponse is an error response from a STUN server (RFC 8489 section
// 14.8), e.g. 420 Unknown Attribute. Match it with errors.As.
type ErrorResponse struct {
	// Code is the ERROR-CODE number, e.g. 420.
	Code int
	// Reason is the server's reason phrase.
	Reason string
	// Unknown lists the attribute types of UNKNOWN-ATTRIBUTES, if any.
	Unknown []uint16
}

func (e *ErrorResponse) Error() string {
	if len(e.Unknown) > 0 {
		return fmt.Sprintf("stun: error response %d (%s), unknown attributes %#04x", e.Code, e.Reason, e.Unknown)
	}
	return fmt.Sprintf("stun: error response %d (%s)", e.Code, e.Reason)
}
