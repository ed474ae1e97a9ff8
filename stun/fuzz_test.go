package stun

import (
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
