package stun

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/pion/stun/v4"
)

const (
	// maxDatagram bounds the datagrams the server reads. A Binding request
	// is a few dozen bytes; one with PADDING is meant to be fragmented
	// (RFC 5780 section 7.6), so 8 KiB leaves room for several 1500-byte
	// fragments while keeping the per-socket buffer small.
	maxDatagram = 8192

	headerSize = 20
	// fingerprintLen is the FINGERPRINT attribute with its header.
	fingerprintLen = 8
	magicCookie    = 0x2112A442

	// CHANGE-REQUEST flags (RFC 5780 section 7.2).
	flagChangeIP   = 0x04
	flagChangePort = 0x02
)

// sock names one of the server's four sockets by the address and port it
// uses: with altAddr set the alternate address, with altPort set the
// alternate port. A plain RFC 8489 server has only sock 0.
type sock uint8

const (
	altAddr sock = 1 << iota
	altPort
)

// handler is the server's packet logic: it decides the answer to one
// datagram, counts, and does no I/O, so tests and the fuzzer drive it
// directly. It is safe for concurrent use with one scratch per goroutine.
type handler struct {
	software stun.Software
	// rfc5780 is set when the server has an alternate address and port.
	rfc5780 bool
	// local holds the endpoint of each socket; only local[0] without
	// rfc5780.
	local [4]netip.AddrPort
	stats *counters
}

// scratch is one goroutine's reusable state, so that answering a request
// allocates nothing.
type scratch struct {
	req, resp stun.Message
	unknown   stun.UnknownAttributes
	ip        [16]byte
	// padded: the request has PADDING; dst: where its answer goes (the
	// source, or its address at RESPONSE-PORT). Set by handle.
	padded bool
	dst    netip.AddrPort
}

func newScratch() *scratch {
	return &scratch{
		req:     stun.Message{Attributes: make(stun.Attributes, 0, 16)},
		resp:    stun.Message{Raw: make([]byte, 0, 256), Attributes: make(stun.Attributes, 0, 8)},
		unknown: make(stun.UnknownAttributes, 0, 8),
	}
}

// netIP returns a in the scratch's IP buffer, valid until the next call.
func (sc *scratch) netIP(a netip.Addr) net.IP {
	if a.Is4() {
		b := a.As4()
		copy(sc.ip[:], b[:])
		return sc.ip[:4]
	}
	sc.ip = a.As16()
	return sc.ip[:]
}

// handle answers the datagram in, which arrived from src on socket at. When
// ok, out is the response (valid until the next call with sc), via the
// socket to send it from and sc.dst where to; otherwise the datagram was
// dropped and counted.
func (h *handler) handle(sc *scratch, in []byte, src netip.AddrPort, at sock) (out []byte, via sock, ok bool) {
	h.stats.datagrams.Add(1)
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	switch {
	case len(in) > maxDatagram:
		return h.drop(&h.stats.oversize)
	case len(in) < headerSize || in[0]&0xC0 != 0 || binary.BigEndian.Uint32(in[4:8]) != magicCookie:
		// RFC 8489 section 5: the two most significant bits are zero and
		// the magic cookie is fixed; anything else is another protocol.
		return h.drop(&h.stats.notSTUN)
	case headerSize+int(binary.BigEndian.Uint16(in[2:4])) != len(in) || len(in)%4 != 0:
		// One message per datagram, padded to 4 bytes (RFC 8489 section 5).
		return h.drop(&h.stats.malformed)
	case !src.Addr().IsValid():
		// Nowhere to answer; the server's read loop never passes this.
		return h.drop(&h.stats.malformed)
	}
	req := &sc.req
	req.Raw = in
	if err := req.Decode(); err != nil {
		return h.drop(&h.stats.malformed)
	}
	if !fingerprintOK(req) {
		return h.drop(&h.stats.badFingerprint)
	}
	if req.Type.Class != stun.ClassRequest {
		return h.drop(&h.stats.notRequest)
	}
	if req.Type.Method != stun.MethodBinding {
		return h.drop(&h.stats.unsupportedMethod)
	}
	h.stats.requests.Add(1)

	var change uint32
	var respPort uint16
	sc.padded, sc.dst = false, src
	sc.unknown = sc.unknown[:0]
	for _, a := range req.Attributes {
		switch {
		case a.Type == stun.AttrChangeRequest && h.rfc5780:
			if len(a.Value) != 4 {
				h.stats.badRequest.Add(1)
				return h.errorResponse(sc, stun.CodeBadRequest, at)
			}
			change = binary.BigEndian.Uint32(a.Value)
		case a.Type == stun.AttrResponsePort && h.rfc5780:
			// A port and two bytes of padding (RFC 5780 section 7.5).
			if len(a.Value) != 4 || binary.BigEndian.Uint16(a.Value) == 0 {
				h.stats.badRequest.Add(1)
				return h.errorResponse(sc, stun.CodeBadRequest, at)
			}
			respPort = binary.BigEndian.Uint16(a.Value)
		case a.Type == stun.AttrPadding:
			sc.padded = true
		case a.Type.Required() && !understood(a.Type):
			sc.unknown = append(sc.unknown, a.Type)
		}
	}
	if len(sc.unknown) > 0 {
		h.stats.unknownAttribute.Add(1)
		return h.errorResponse(sc, stun.CodeUnknownAttribute, at)
	}
	if respPort != 0 && sc.padded && h.rfc5780 {
		// RFC 5780 section 6: PADDING with RESPONSE-PORT is a 400.
		h.stats.badRequest.Add(1)
		return h.errorResponse(sc, stun.CodeBadRequest, at)
	}
	if respPort != 0 {
		// The answer goes to the request's source address at this port:
		// the second socket of a mapping-lifetime test (RFC 5780 section
		// 4.6). The address never changes, so a forged request can aim it
		// at no host the forged source address could not.
		sc.dst = netip.AddrPortFrom(src.Addr(), respPort)
	}

	via = at
	if change&flagChangeIP != 0 {
		via ^= altAddr
	}
	if change&flagChangePort != 0 {
		via ^= altPort
	}
	h.stats.responses.Add(1)
	if via != at {
		h.stats.changed.Add(1)
	}
	if err := h.success(sc, src, at, via); err != nil {
		h.stats.sendErrors.Add(1)
		return nil, 0, false
	}
	return sc.resp.Raw, via, true
}

func (h *handler) drop(c *atomic.Uint64) ([]byte, sock, bool) {
	c.Add(1)
	return nil, 0, false
}

// understood reports whether the server knows a comprehension-required
// attribute: those RFC 8489 defines. XOR-MAPPED-ADDRESS also stands for
// its pre-RFC 5389 code 0x8020, which pion folds into it. PADDING (RFC
// 5780 section 7.6) makes room for a larger answer, which then carries
// PADDING too. CHANGE-REQUEST and RESPONSE-PORT are handled by the
// caller: they are understood only in RFC 5780 mode.
func understood(t stun.AttrType) bool {
	switch t {
	case stun.AttrMappedAddress, stun.AttrUsername, stun.AttrMessageIntegrity,
		stun.AttrErrorCode, stun.AttrUnknownAttributes, stun.AttrRealm,
		stun.AttrNonce, stun.AttrMessageIntegritySHA256, stun.AttrPasswordAlgorithm,
		stun.AttrUserhash, stun.AttrXORMappedAddress, stun.AttrPadding:
		return true
	}
	return false
}

// fingerprintOK reports whether m's FINGERPRINT, if any, is valid: present
// once, the last attribute of the message, with the right CRC (RFC 8489
// section 14.7). A message without FINGERPRINT passes.
func fingerprintOK(m *stun.Message) bool {
	n := 0
	for _, a := range m.Attributes {
		if a.Type == stun.AttrFingerprint {
			n++
		}
	}
	if n == 0 {
		return true
	}
	last := m.Attributes[len(m.Attributes)-1]
	raw := m.Raw
	if n > 1 || last.Type != stun.AttrFingerprint || len(last.Value) != 4 || len(raw) < headerSize+fingerprintLen {
		return false
	}
	// pion skips attributes that follow MESSAGE-INTEGRITY, so "last in
	// the list" must also be checked as "last in the datagram".
	if &last.Value[0] != &raw[len(raw)-4] {
		return false
	}
	return binary.BigEndian.Uint32(last.Value) == stun.FingerprintValue(raw[:len(raw)-fingerprintLen])
}

// success builds the Binding success response in sc.resp, no larger than
// the request unless that is too small for XOR-MAPPED-ADDRESS alone (see
// size.go). Optional attributes go in while they fit, in this order:
// FINGERPRINT, OTHER-ADDRESS, RESPONSE-ORIGIN, MAPPED-ADDRESS, SOFTWARE.
func (h *handler) success(sc *scratch, src netip.AddrPort, at, via sock) error {
	req, resp := &sc.req, &sc.resp
	origin := h.local[via]
	// OTHER-ADDRESS is the other address and the other port relative
	// to where the request arrived (RFC 5780 section 6.1, Table 1).
	other := h.local[at^altAddr^altPort]
	b := budget{left: max(len(req.Raw), minAnswer(src.Addr())) - minAnswer(src.Addr())}
	withFP := b.take(fingerprintLen)
	withOther := h.rfc5780 && b.take(addrAttrLen(other.Addr()))
	withOrigin := h.rfc5780 && b.take(addrAttrLen(origin.Addr()))
	withMapped := b.take(addrAttrLen(src.Addr()))
	withSoftware := len(h.software) > 0 && b.take(attrLen(len(h.software)))
	if !withFP || !withMapped || (len(h.software) > 0 && !withSoftware) || (h.rfc5780 && !(withOther && withOrigin)) {
		h.stats.trimmed.Add(1)
	}

	resp.Reset()
	resp.Type = stun.BindingSuccess
	resp.TransactionID = req.TransactionID
	resp.WriteHeader()
	port := int(src.Port())
	if err := (stun.XORMappedAddress{IP: sc.netIP(src.Addr()), Port: port}).AddTo(resp); err != nil {
		return err
	}
	if withMapped {
		if err := (&stun.MappedAddress{IP: sc.netIP(src.Addr()), Port: port}).AddTo(resp); err != nil {
			return err
		}
	}
	if withOrigin {
		if err := (&stun.ResponseOrigin{IP: sc.netIP(origin.Addr()), Port: int(origin.Port())}).AddTo(resp); err != nil {
			return err
		}
	}
	if withOther {
		if err := (&stun.OtherAddress{IP: sc.netIP(other.Addr()), Port: int(other.Port())}).AddTo(resp); err != nil {
			return err
		}
	}
	if withSoftware {
		if err := h.software.AddTo(resp); err != nil {
			return err
		}
	}
	if sc.padded {
		// RFC 5780 section 6 asks for PADDING of the outgoing MTU; the
		// answer is padded to the request's size instead, which a client
		// testing fragments makes MTU-sized or more, so it is never larger
		// than what was sent (see size.go).
		trailing := 0
		if withFP {
			trailing = fingerprintLen
		}
		pad(resp, trailing, len(req.Raw))
	}
	if withFP {
		return stun.Fingerprint.AddTo(resp)
	}
	return nil
}

// errorResponse builds an error response with code in sc.resp, listing
// sc.unknown for 420. Error responses leave from the socket the request
// arrived on. An error response is never larger than the request: when
// even ERROR-CODE without a reason phrase (and UNKNOWN-ATTRIBUTES for 420)
// does not fit, the request goes unanswered; the reason phrase, FINGERPRINT
// and SOFTWARE follow while they fit.
func (h *handler) errorResponse(sc *scratch, code stun.ErrorCode, at sock) ([]byte, sock, bool) {
	req, resp := &sc.req, &sc.resp
	reason := errorReason(code)
	b := budget{left: len(req.Raw) - headerSize}
	fits := b.take(attrLen(4))
	if code == stun.CodeUnknownAttribute {
		fits = fits && b.take(attrLen(2*len(sc.unknown)))
	}
	if !fits {
		h.stats.unanswered.Add(1)
		return nil, 0, false
	}
	if !b.take(attrLen(4+len(reason)) - attrLen(4)) {
		reason = nil
	}
	withFP := b.take(fingerprintLen)
	withSoftware := len(h.software) > 0 && b.take(attrLen(len(h.software)))

	resp.Reset()
	resp.Type = stun.BindingError
	resp.TransactionID = req.TransactionID
	resp.WriteHeader()
	err := stun.ErrorCodeAttribute{Code: code, Reason: reason}.AddTo(resp)
	if err == nil && code == stun.CodeUnknownAttribute {
		err = sc.unknown.AddTo(resp)
	}
	if err == nil && withSoftware {
		err = h.software.AddTo(resp)
	}
	if err == nil && withFP {
		err = stun.Fingerprint.AddTo(resp)
	}
	if err != nil {
		h.stats.sendErrors.Add(1)
		return nil, 0, false
	}
	return resp.Raw, at, true
}

// errorReason is the reason phrase the server sends with code.
func errorReason(code stun.ErrorCode) []byte {
	switch code {
	case stun.CodeUnknownAttribute:
		return reasonUnknownAttribute
	case stun.CodeBadRequest:
		return reasonBadRequest
	}
	return nil
}

var (
	reasonUnknownAttribute = []byte("Unknown Attribute")
	reasonBadRequest       = []byte("Bad Request")
)
