package stun

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/pion/stun/v4"
)

// clientBuffer bounds the datagrams a client reads; responses of other
// servers may be longer than what our server accepts.
const clientBuffer = 2048

// rfc8489Waits is how long Bind waits after each transmission: RTO 500ms
// doubling for Rc = 7 requests, the last one waited on for Rm = 16 RTOs
// (RFC 8489 section 6.2.1), 39.5s in all unless ctx ends sooner.
var rfc8489Waits = []time.Duration{
	500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
	8 * time.Second, 16 * time.Second, 8 * time.Second,
}

// Bind sends a Binding request to server on conn and returns the mapped
// address of the response: conn's address as the server saw it, after
// every NAT on the way. It retransmits as RFC 8489 says until an answer
// comes, every retransmission has gone unanswered (ErrNoResponse) or ctx
// ends (ErrNoResponse wrapping ctx's error).
//
// Bind reads conn while it runs and discards datagrams that are not the
// answer, so the caller must not read conn concurrently. It leaves conn's
// read deadline cleared.
func Bind(ctx context.Context, conn net.PacketConn, server netip.AddrPort) (netip.AddrPort, error) {
	server = unmap(server)
	// FINGERPRINT tells the answer apart from the other protocols on a
	// shared socket (RFC 8489 section 7), so make room for it too.
	r, err := bind(ctx, conn, server, minAnswer(server.Addr())+fingerprintLen)
	if refusedPadding(err) {
		r, err = bind(ctx, conn, server, 0)
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("stun: bind via %v: %w", server, err)
	}
	return r.mapped, nil
}

// bind runs one Binding transaction whose request is padded to answer.
func bind(ctx context.Context, conn net.PacketConn, server netip.AddrPort, answer int) (response, error) {
	req, err := newRequest(0, answer)
	if err != nil {
		return response{}, err
	}
	return transact(ctx, conn, server, req, rfc8489Waits)
}

// refusedPadding reports whether err is a 420 naming PADDING: a server
// without RFC 5780, which the client may ask again unpadded.
func refusedPadding(err error) bool {
	var er *ErrorResponse
	return errors.As(err, &er) && er.Code == int(stun.CodeUnknownAttribute) &&
		slices.Contains(er.Unknown, uint16(stun.AttrPadding))
}

// newRequest builds a Binding request with a fresh transaction ID, a
// CHANGE-REQUEST with change when that is not zero, and PADDING to make
// it answer bytes long: servers that do not amplify answer no larger
// than the request, so answer is the size of the answer the caller
// needs. Zero pads nothing.
func newRequest(change uint32, answer int) (*stun.Message, error) {
	m := stun.New()
	m.Type = stun.BindingRequest
	if err := m.NewTransactionID(); err != nil {
		return nil, fmt.Errorf("transaction id: %w", err)
	}
	m.WriteHeader()
	if change != 0 {
		var v [4]byte
		binary.BigEndian.PutUint32(v[:], change)
		m.Add(stun.AttrChangeRequest, v[:])
	}
	pad(m, fingerprintLen, answer)
	if err := stun.Fingerprint.AddTo(m); err != nil {
		return nil, fmt.Errorf("fingerprint: %w", err)
	}
	return m, nil
}

// response is what a client takes from a success response.
type response struct {
	mapped netip.AddrPort // XOR-MAPPED-ADDRESS, or MAPPED-ADDRESS
	other  netip.AddrPort // OTHER-ADDRESS, if present
	origin netip.AddrPort // RESPONSE-ORIGIN, if present
	from   netip.AddrPort // the datagram's source
}

// transact sends req to dst on conn and waits for the response with its
// transaction ID, retransmitting after each wait in waits. Datagrams that
// are not that response are discarded.
func transact(ctx context.Context, conn net.PacketConn, dst netip.AddrPort, req *stun.Message, waits []time.Duration) (response, error) {
	// Cancellation interrupts a blocked read through the deadline. stop
	// waits for a running callback, so it cannot touch conn after return.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		_ = conn.SetReadDeadline(time.Unix(1, 0))
	})
	defer func() {
		if !stop() {
			<-fired
		}
		_ = conn.SetReadDeadline(time.Time{})
	}()

	to := net.UDPAddrFromAddrPort(dst)
	buf := make([]byte, clientBuffer)
	for _, wait := range waits {
		if err := ctx.Err(); err != nil {
			return response{}, fmt.Errorf("%w: %w", ErrNoResponse, err)
		}
		if _, err := conn.WriteTo(req.Raw, to); err != nil {
			return response{}, fmt.Errorf("send to %v: %w", dst, err)
		}
		if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
			return response{}, fmt.Errorf("set read deadline: %w", err)
		}
		// A cancellation that fired before the deadline above was set
		// would otherwise be overwritten by it.
		if err := ctx.Err(); err != nil {
			return response{}, fmt.Errorf("%w: %w", ErrNoResponse, err)
		}
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				if ctx.Err() != nil {
					return response{}, fmt.Errorf("%w: %w", ErrNoResponse, ctx.Err())
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break
				}
				return response{}, fmt.Errorf("read: %w", err)
			}
			r, ours, err := parseResponse(buf[:n], req.TransactionID)
			if !ours {
				continue
			}
			if err != nil {
				return response{}, err
			}
			r.from, _ = addrPortOf(from)
			return r, nil
		}
	}
	return response{}, ErrNoResponse
}

// parseResponse decodes b as the response to the transaction id. ours is
// false for anything else (other traffic, other transactions, a broken
// FINGERPRINT), which the caller ignores.
func parseResponse(b []byte, id [stun.TransactionIDSize]byte) (r response, ours bool, err error) {
	if !stun.IsMessage(b) {
		return r, false, nil
	}
	m := &stun.Message{Raw: b}
	if err := m.Decode(); err != nil || m.TransactionID != id || !fingerprintOK(m) {
		return r, false, nil //nolint:nilerr // not our answer: the caller keeps waiting
	}
	switch {
	case m.Type.Class == stun.ClassRequest || m.Type.Class == stun.ClassIndication:
		return r, false, nil
	case m.Type.Method != stun.MethodBinding:
		return r, true, fmt.Errorf("%w: %v to a Binding request", ErrBadResponse, m.Type)
	case m.Type.Class == stun.ClassErrorResponse:
		return r, true, errorResponse(m)
	}
	var xor stun.XORMappedAddress
	if err := xor.GetFrom(m); err == nil {
		r.mapped = addrPortFromIP(xor.IP, xor.Port)
	} else {
		var mapped stun.MappedAddress
		if err := mapped.GetFrom(m); err != nil {
			return r, true, fmt.Errorf("%w: no XOR-MAPPED-ADDRESS or MAPPED-ADDRESS", ErrBadResponse)
		}
		r.mapped = addrPortFromIP(mapped.IP, mapped.Port)
	}
	if !r.mapped.IsValid() {
		return r, true, fmt.Errorf("%w: unusable mapped address", ErrBadResponse)
	}
	var other stun.OtherAddress
	if other.GetFrom(m) == nil {
		r.other = addrPortFromIP(other.IP, other.Port)
	}
	var origin stun.ResponseOrigin
	if origin.GetFrom(m) == nil {
		r.origin = addrPortFromIP(origin.IP, origin.Port)
	}
	return r, true, nil
}

// errorResponse turns an error response into an *ErrorResponse.
func errorResponse(m *stun.Message) error {
	var ec stun.ErrorCodeAttribute
	if err := ec.GetFrom(m); err != nil {
		return fmt.Errorf("%w: error response without a valid ERROR-CODE", ErrBadResponse)
	}
	e := &ErrorResponse{Code: int(ec.Code), Reason: string(ec.Reason)}
	var ua stun.UnknownAttributes
	if ua.GetFrom(m) == nil {
		for _, t := range ua {
			e.Unknown = append(e.Unknown, uint16(t))
		}
	}
	return e
}

func addrPortFromIP(ip net.IP, port int) netip.AddrPort {
	a, ok := netip.AddrFromSlice(ip)
	if !ok || port < 0 || port > 0xFFFF {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(a.Unmap(), uint16(port))
}
