package stun

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/pion/stun/v4"
)

// FuzzHandler feeds arbitrary datagrams to the server's packet logic. It
// must never panic and must account for every datagram exactly once. What
// it answers must be a well-formed STUN response to that very request,
// from one of the server's sockets, no larger than the request (but for
// the bare mapped address, see size.go), and a response fed back in must
// be dropped, so two servers can never ping-pong.
func FuzzHandler(f *testing.F) {
	seeds := [][]byte{
		message(f, stun.BindingRequest),
		message(f, stun.BindingRequest, stun.Fingerprint),
		message(f, stun.BindingRequest, changeRequest(flagChangeIP|flagChangePort), stun.Fingerprint),
		message(f, stun.BindingRequest, rawAttr{0x7F01, []byte{1}}, rawAttr{stun.AttrChangeRequest, []byte{4}}),
		message(f, stun.BindingRequest, stun.NewUsername("u"), stun.NewShortTermIntegrity("p"), stun.Fingerprint),
		message(f, stun.BindingRequest, rawAttr{stun.AttrPadding, make([]byte, 64)}, stun.Fingerprint),
		message(f, stun.BindingRequest, rawAttr{stun.AttrPadding, make([]byte, 8)}, rawAttr{0x7F01, nil}),
		message(f, stun.BindingSuccess, stun.Fingerprint),
		message(f, stun.NewType(stun.MethodAllocate, stun.ClassRequest)),
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		{0, 1, 0, 0, 0x21, 0x12, 0xA4, 0x42},
	}
	for i, s := range seeds {
		f.Add(s, uint8(i), i%2 == 0, i%3 == 0)
	}
	f.Fuzz(func(t *testing.T, in []byte, at uint8, rfc5780, v6 bool) {
		h := testHandler(rfc5780)
		recv := sock(at) & (altAddr | altPort)
		if !rfc5780 {
			recv = 0
		}
		src := testClient
		if v6 {
			src = netip.MustParseAddrPort("[2001:db8::1]:1")
		}
		sc := newScratch()
		// The handler may keep in as the request's buffer; keep a copy to
		// compare transaction IDs with.
		req := append([]byte(nil), in...)
		out, via, ok := h.handle(sc, in, src, recv)

		st := h.stats.snapshot()
		if st.Datagrams != 1 || st.Datagrams != st.Requests+st.Dropped.Total() ||
			st.Requests != st.Responses+st.UnknownAttribute+st.BadRequest {
			t.Fatalf("datagram not accounted for exactly once: %+v", st)
		}
		if !ok {
			if st.Requests != 0 && st.SendErrors+st.Unanswered == 0 {
				t.Fatalf("request neither answered nor counted as a send error or unanswered: %+v", st)
			}
			return
		}
		if limit := max(len(req), minAnswer(unmap(src).Addr())); len(out) > limit {
			t.Fatalf("%d-byte answer to a %d-byte request, more than %d", len(out), len(req), limit)
		}
		if !h.local[via].IsValid() {
			t.Fatalf("answer from socket %d, which does not exist", via)
		}
		m := new(stun.Message)
		if err := stun.Decode(out, m); err != nil {
			t.Fatalf("response does not decode: %v", err)
		}
		if !fingerprintOK(m) {
			t.Fatal("response fingerprint is wrong")
		}
		if m.Type.Method != stun.MethodBinding || (m.Type.Class != stun.ClassSuccessResponse && m.Type.Class != stun.ClassErrorResponse) {
			t.Fatalf("response type %v", m.Type)
		}
		if string(m.TransactionID[:]) != string(req[8:20]) {
			t.Fatalf("response transaction ID %x, request %x", m.TransactionID, req[8:20])
		}
		if m.Type.Class == stun.ClassErrorResponse && len(out) > len(req) {
			t.Fatalf("%d-byte error response to a %d-byte request", len(out), len(req))
		}
		if m.Type.Class == stun.ClassSuccessResponse {
			r, ours, err := parseResponse(out, m.TransactionID)
			if !ours || err != nil || r.mapped != unmap(src) {
				t.Fatalf("success response: mapped %v (want %v), ours %t, err %v", r.mapped, src, ours, err)
			}
		}
		if _, _, ok := h.handle(sc, append([]byte(nil), out...), src, via); ok {
			t.Fatal("a response was answered")
		}
	})
}

// FuzzParseResponse feeds arbitrary datagrams to the client's response
// parser, as if they arrived on a socket waiting for transaction id. It
// must never panic; only a STUN response carrying that transaction ID is
// taken as the answer; an accepted answer is a Binding success with a
// usable mapped address, and a rejected one is ErrBadResponse or an
// *ErrorResponse.
func FuzzParseResponse(f *testing.F) {
	id := [stun.TransactionIDSize]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	with := func(setters ...stun.Setter) []byte {
		m, err := stun.Build(append([]stun.Setter{stun.NewTransactionIDSetter(id)}, setters...)...)
		if err != nil {
			f.Fatal(err)
		}
		return m.Raw
	}
	ip := testClient.Addr().AsSlice()
	f.Add(with(stun.BindingSuccess, &stun.XORMappedAddress{IP: ip, Port: 1}, stun.Fingerprint), true)
	f.Add(with(stun.BindingSuccess, &stun.MappedAddress{IP: ip, Port: 2}, &stun.OtherAddress{IP: ip, Port: 3}, &stun.ResponseOrigin{IP: ip, Port: 4}), true)
	f.Add(with(stun.BindingSuccess, &stun.XORMappedAddress{IP: netip.MustParseAddr("2001:db8::1").AsSlice(), Port: 5}), false)
	f.Add(with(stun.BindingError, stun.CodeUnknownAttribute, stun.UnknownAttributes{stun.AttrPadding}), true)
	f.Add(with(stun.BindingError, rawAttr{stun.AttrErrorCode, []byte{0, 0}}), true)
	f.Add(with(stun.BindingSuccess), true)
	f.Add(with(stun.BindingRequest, stun.Fingerprint), true)
	f.Add(with(stun.NewType(stun.MethodAllocate, stun.ClassSuccessResponse)), true)
	f.Add(with(stun.BindingSuccess, rawAttr{stun.AttrXORMappedAddress, []byte{0, 3, 0, 0}}), true)
	f.Add([]byte("not stun"), false)
	f.Fuzz(func(t *testing.T, b []byte, ownID bool) {
		b = append([]byte(nil), b...)
		if ownID && len(b) >= headerSize {
			copy(b[8:20], id[:])
		}
		orig := append([]byte(nil), b...)
		r, ours, err := parseResponse(b, id)
		if string(b) != string(orig) {
			t.Fatal("the parser changed the datagram")
		}
		if !ours {
			if err != nil || r != (response{}) {
				t.Fatalf("not ours, yet %+v, %v", r, err)
			}
			return
		}
		m := new(stun.Message)
		if stun.Decode(orig, m) != nil || m.TransactionID != id {
			t.Fatal("took a datagram that is not a response to the transaction")
		}
		if err != nil {
			var er *ErrorResponse
			if !errors.Is(err, ErrBadResponse) && !errors.As(err, &er) {
				t.Fatalf("error %v is neither ErrBadResponse nor an error response", err)
			}
			if errors.As(err, &er) && m.Type.Class != stun.ClassErrorResponse {
				t.Fatalf("error response from a %v", m.Type)
			}
			return
		}
		if m.Type != stun.BindingSuccess || !r.mapped.IsValid() {
			t.Fatalf("accepted a %v with mapped address %v", m.Type, r.mapped)
		}
		if r.mapped.Addr().Is4In6() || r.other.Addr().Is4In6() || r.origin.Addr().Is4In6() {
			t.Fatalf("addresses not unmapped: %+v", r)
		}
	})
}
