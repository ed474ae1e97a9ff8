package stun

import (
	"net/netip"

	"github.com/pion/stun/v4"
)

// An unauthenticated STUN server is a reflector: anyone can send it a
// request with a forged source address and have the answer delivered to a
// victim, and the RFC 5780 attributes make the answer to a bare request four
// times its size. RFC 5780's security considerations ask servers not to
// amplify; so the server sizes every answer to the request it got: a client that wants more attributes pads its request
// (RFC 5780 section 7.6, PADDING) to the size of the answer it needs.
//
// The only exception is the smallest useful answer, a header and
// XOR-MAPPED-ADDRESS (32 bytes for IPv4, 44 for IPv6): RFC 8489 clients,
// pion/ice's candidate gathering among them, send bare 20-byte requests and
// must still learn their address. That bounds the factor at 1.6 (2.2 for
// IPv6) for the smallest request and at 1 for any request of that size or
// more. The server verifies no credentials, so no request counts as
// authenticated and none earns a larger answer.

// attrLen is the wire size of an attribute with an n-byte value: a 4-byte
// header and the value padded to 4 bytes (RFC 8489 section 14).
func attrLen(n int) int { return 4 + (n+3)&^3 }

// addrAttrLen is the wire size of an address attribute (MAPPED-ADDRESS and
// its XOR, RESPONSE-ORIGIN, OTHER-ADDRESS) carrying a: family, port and the
// address (RFC 8489 section 14.1).
func addrAttrLen(a netip.Addr) int {
	if a.Is4() {
		return attrLen(4 + 4)
	}
	return attrLen(4 + 16)
}

// minAnswer is the smallest success response to a client at src.
func minAnswer(src netip.Addr) int { return headerSize + addrAttrLen(src) }

// budget is the room left in an answer. The zero value has none.
type budget struct{ left int }

// take reserves n bytes and reports whether they fit.
func (b *budget) take(n int) bool {
	if n > b.left {
		return false
	}
	b.left -= n
	return true
}

// pad adds a PADDING attribute to m, which must not have FINGERPRINT yet,
// so that m with the trailing bytes it will still get reaches size. It
// adds nothing when m is already large enough.
func pad(m *stun.Message, trailing, size int) {
	need := size - len(m.Raw) - trailing
	if need <= 0 {
		return
	}
	// attrLen(n) >= need: a header and at least need-4 bytes of value.
	n := max(need-4, 0)
	n = (n + 3) &^ 3
	m.Add(stun.AttrPadding, make([]byte, n))
}
