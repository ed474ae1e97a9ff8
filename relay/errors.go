package relay

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the package returns wraps one of these, a
// *CloseError, or the network error that caused it.
var (
	// ErrClosed is returned by operations on a closed Client or Server.
	ErrClosed = errors.New("relay: closed")
	// ErrNotConnected is returned by Client.Send while the client has no
	// connection to the relay (it is dialing or backing off).
	ErrNotConnected = errors.New("relay: not connected")
	// ErrPacketSize reports a packet that is empty or longer than
	// MaxPacketSize.
	ErrPacketSize = errors.New("relay: packet size out of range")

	// ErrTokenMalformed reports a token that does not decode: wrong length,
	// bad base64 or an unknown version.
	ErrTokenMalformed = errors.New("relay: malformed token")
	// ErrTokenInvalid reports a token whose MAC does not verify: forged,
	// altered, or issued with another secret.
	ErrTokenInvalid = errors.New("relay: token MAC mismatch")
	// ErrTokenExpired reports a genuine token past its expiry.
	ErrTokenExpired = errors.New("relay: token expired")
	// ErrTokenRenewal reports that ClientConfig.RenewToken failed or
	// returned a token the client cannot use.
	ErrTokenRenewal = errors.New("relay: token renewal failed")
	// ErrWeakSecret reports a token secret shorter than MinSecretSize.
	ErrWeakSecret = errors.New("relay: token secret too short")

	// ErrProtocol marks a peer that broke the wire format (see
	// docs/LRP.md): a garbled or oversized frame, or a frame that is not
	// allowed in its direction or state. The connection is closed.
	ErrProtocol = errors.New("relay: protocol violation")
)

// CloseCode says why one side closed an LRP connection. On TCP it travels
// in a CLOSE frame, on QUIC as the application error code of the
// CONNECTION_CLOSE frame.
type CloseCode uint8

// Close codes; docs/LRP.md lists them with their meaning.
const (
	CloseNormal       CloseCode = 0 // going away (client closed, server shutting down)
	CloseAuthInvalid  CloseCode = 1 // token malformed or its MAC does not verify
	CloseAuthExpired  CloseCode = 2 // token expired: fetch a fresh one from control
	CloseAuthWrongKey CloseCode = 3 // token issued for another key than the one presented
	CloseVersion      CloseCode = 4 // unsupported protocol version
	CloseServerFull   CloseCode = 5 // MaxClients reached
	CloseReplaced     CloseCode = 6 // a newer connection registered the same key
	CloseProtocol     CloseCode = 7 // wire format violated
	CloseIdle         CloseCode = 8 // nothing received for three keepalive intervals
)

var closeCodeNames = [...]string{"normal", "auth-invalid", "auth-expired", "auth-wrong-key", "version", "server-full", "replaced", "protocol", "idle"}

func (c CloseCode) String() string {
	if int(c) < len(closeCodeNames) {
		return closeCodeNames[c]
	}
	return fmt.Sprintf("close-code-%d", uint8(c))
}

// CloseError is how a client learns why the relay closed its connection
// (or refused it): Client.WaitConnected returns it after a refused hello.
type CloseError struct {
	Code CloseCode
	// Message is the peer's explanation: at most MaxCloseMessage bytes of
	// valid UTF-8, with control and format characters replaced by '?'.
	Message string
	// Remote is true when the peer closed, false when this side did.
	Remote bool
	// byClient: Remote, and this side is the relay (the peer a client).
	byClient bool
}

func (e *CloseError) Error() string {
	who := "relay"
	switch {
	case !e.Remote:
		who = "local"
	case e.byClient:
		who = "client"
	}
	if e.Message == "" {
		return fmt.Sprintf("relay: closed by %s: %s", who, e.Code)
	}
	return fmt.Sprintf("relay: closed by %s: %s: %s", who, e.Code, e.Message)
}

// IsAuth reports whether the code is one of the authentication refusals.
func (c CloseCode) IsAuth() bool {
	return c == CloseAuthInvalid || c == CloseAuthExpired || c == CloseAuthWrongKey
}
