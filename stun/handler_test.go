package stun

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/pion/stun/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	testPrimary   = netip.MustParseAddrPort("203.0.113.100:3478")
	testAlternate = netip.MustParseAddrPort("203.0.113.101:3479")
	testClient    = netip.MustParseAddrPort("198.51.100.7:40000")
)

// testHandler is a handler with the endpoints of testPrimary and, for
// rfc5780, testAlternate.
func testHandler(rfc5780 bool) *handler {
	h := &handler{software: stun.NewSoftware(DefaultSoftware), rfc5780: rfc5780, stats: new(counters)}
	h.local[0] = testPrimary
	if rfc5780 {
		h.local = endpoints(testPrimary, testAlternate)
	}
	return h
}

// message builds a STUN message of type t with setters applied in order.
func message(tb testing.TB, t stun.MessageType, setters ...stun.Setter) []byte {
	tb.Helper()
	m, err := stun.Build(append([]stun.Setter{stun.TransactionID, t}, setters...)...)
	require.NoError(tb, err)
	return m.Raw
}

// rawAttr adds an attribute with an arbitrary type and value.
type rawAttr struct {
	t stun.AttrType
	v []byte
}

func (a rawAttr) AddTo(m *stun.Message) error {
	m.Add(a.t, a.v)
	return nil
}

func changeRequest(flags uint32) rawAttr {
	v := make([]byte, 4)
	binary.BigEndian.PutUint32(v, flags)
	return rawAttr{stun.AttrChangeRequest, v}
}

// decode parses a response the handler produced.
func decode(t *testing.T, out []byte) *stun.Message {
	t.Helper()
	m := new(stun.Message)
	require.NoError(t, stun.Decode(out, m))
	require.NoError(t, stun.Fingerprint.Check(m), "every response ends with a valid FINGERPRINT")
	return m
}

func TestHandlerSuccess(t *testing.T) {
	v6Client := netip.MustParseAddrPort("[2001:db8::7]:40000")
	tests := []struct {
		name    string
		rfc5780 bool
		src     netip.AddrPort
		at      sock
		flags   uint32
		wantVia sock
	}{
		{name: "plain", src: testClient},
		{name: "plain ipv6 client", src: v6Client},
		{name: "4in6 client is answered as ipv4", src: netip.AddrPortFrom(netip.AddrFrom16(testClient.Addr().As16()), testClient.Port())},
		{name: "rfc5780 primary", rfc5780: true, src: testClient},
		{name: "rfc5780 at alternate", rfc5780: true, src: testClient, at: altAddr | altPort, wantVia: altAddr | altPort},
		{name: "change ip", rfc5780: true, src: testClient, flags: flagChangeIP, wantVia: altAddr},
		{name: "change port", rfc5780: true, src: testClient, flags: flagChangePort, wantVia: altPort},
		{name: "change both", rfc5780: true, src: testClient, flags: flagChangeIP | flagChangePort, wantVia: altAddr | altPort},
		{name: "change both at alternate port", rfc5780: true, src: testClient, at: altPort, flags: flagChangeIP | flagChangePort, wantVia: altAddr},
		{name: "change flags zero", rfc5780: true, src: testClient, at: altAddr, wantVia: altAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := testHandler(tt.rfc5780)
			setters := []stun.Setter{stun.NewSoftware("test client")}
			if tt.flags != 0 || tt.name == "change flags zero" {
				setters = append(setters, changeRequest(tt.flags))
			}
			setters = append(setters, padding(128), stun.Fingerprint)
			in := message(t, stun.BindingRequest, setters...)
			out, via, ok := h.handle(newScratch(), in, tt.src, tt.at)
			require.True(t, ok, "request dropped: %+v", h.stats.snapshot())
			assert.Equal(t, tt.wantVia, via, "socket the response leaves from")

			m := decode(t, out)
			assert.Equal(t, stun.BindingSuccess, m.Type)
			assert.Equal(t, in[8:20], m.TransactionID[:])
			want := unmap(tt.src)
			var xor stun.XORMappedAddress
			require.NoError(t, xor.GetFrom(m))
			assert.Equal(t, want, addrPortFromIP(xor.IP, xor.Port), "XOR-MAPPED-ADDRESS")
			assert.Len(t, xor.IP, want.Addr().BitLen()/8, "address family")
			var mapped stun.MappedAddress
			require.NoError(t, mapped.GetFrom(m))
			assert.Equal(t, want, addrPortFromIP(mapped.IP, mapped.Port), "MAPPED-ADDRESS")
			var sw stun.Software
			require.NoError(t, sw.GetFrom(m))
			assert.Equal(t, DefaultSoftware, sw.String())

			var origin stun.ResponseOrigin
			var other stun.OtherAddress
			if !tt.rfc5780 {
				assert.Error(t, origin.GetFrom(m), "RESPONSE-ORIGIN without RFC 5780")
				assert.Error(t, other.GetFrom(m), "OTHER-ADDRESS without RFC 5780")
				return
			}
			local := endpoints(testPrimary, testAlternate)
			require.NoError(t, origin.GetFrom(m))
			assert.Equal(t, local[tt.wantVia], addrPortFromIP(origin.IP, origin.Port), "RESPONSE-ORIGIN")
			require.NoError(t, other.GetFrom(m))
			assert.Equal(t, local[tt.at^altAddr^altPort], addrPortFromIP(other.IP, other.Port), "OTHER-ADDRESS")

			st := h.stats.snapshot()
			assert.Equal(t, uint64(1), st.Responses)
			assert.Equal(t, boolCount(tt.wantVia != tt.at), st.Changed)
			assert.Zero(t, st.Trimmed, "a padded request gets every attribute")
		})
	}
}

func boolCount(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func TestHandlerErrors(t *testing.T) {
	tests := []struct {
		name        string
		rfc5780     bool
		setters     []stun.Setter
		wantCode    int
		wantUnknown []uint16
	}{
		{
			name:        "change-request without alternate",
			setters:     []stun.Setter{changeRequest(flagChangePort)},
			wantCode:    420,
			wantUnknown: []uint16{0x0003},
		},
		{
			name:        "empty change-request without alternate",
			setters:     []stun.Setter{changeRequest(0), stun.Fingerprint},
			wantCode:    420,
			wantUnknown: []uint16{0x0003},
		},
		{
			name:        "unknown comprehension-required",
			rfc5780:     true,
			setters:     []stun.Setter{rawAttr{0x7F01, []byte{1, 2, 3}}, stun.NewSoftware("x"), rawAttr{0x7F02, []byte{0, 80, 0, 0}}},
			wantCode:    420,
			wantUnknown: []uint16{0x7F01, 0x7F02},
		},
		{
			name:        "response-port without alternate",
			setters:     []stun.Setter{rawAttr{0x7F01, []byte{1, 2, 3}}, rawAttr{stun.AttrResponsePort, []byte{0, 80, 0, 0}}},
			wantCode:    420,
			wantUnknown: []uint16{0x7F01, 0x0027},
		},
		{
			// Every request here is padded: RFC 5780 section 6.
			name:     "response-port with padding",
			rfc5780:  true,
			setters:  []stun.Setter{rawAttr{stun.AttrResponsePort, []byte{0, 80, 0, 0}}},
			wantCode: 400,
		},
		{
			name:     "short response-port",
			rfc5780:  true,
			setters:  []stun.Setter{rawAttr{stun.AttrResponsePort, []byte{0, 80}}},
			wantCode: 400,
		},
		{
			name:     "response-port zero",
			rfc5780:  true,
			setters:  []stun.Setter{rawAttr{stun.AttrResponsePort, []byte{0, 0, 0, 0}}},
			wantCode: 400,
		},
		{
			name:     "short change-request",
			rfc5780:  true,
			setters:  []stun.Setter{rawAttr{stun.AttrChangeRequest, []byte{0, 4}}},
			wantCode: 400,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := testHandler(tt.rfc5780)
			at := sock(0)
			if tt.rfc5780 {
				at = altPort
			}
			in := message(t, stun.BindingRequest, append([]stun.Setter{padding(64)}, tt.setters...)...)
			out, via, ok := h.handle(newScratch(), in, testClient, at)
			require.True(t, ok)
			assert.Equal(t, at, via, "errors leave from the receiving socket")
			assert.LessOrEqual(t, len(out), len(in), "error response larger than its request")
			m := decode(t, out)
			assert.Equal(t, stun.BindingError, m.Type)

			_, ours, err := parseResponse(out, m.TransactionID)
			require.True(t, ours)
			var er *ErrorResponse
			require.ErrorAs(t, err, &er)
			assert.Equal(t, tt.wantCode, er.Code)
			assert.Equal(t, tt.wantUnknown, er.Unknown)

			st := h.stats.snapshot()
			assert.Equal(t, uint64(1), st.Requests)
			assert.Equal(t, boolCount(tt.wantCode == 420), st.UnknownAttribute)
			assert.Equal(t, boolCount(tt.wantCode == 400), st.BadRequest)
			assert.Zero(t, st.Unanswered)
		})
	}
}

// padding is a PADDING attribute with an n-byte value (RFC 5780 section
// 7.6), the way a client makes room for a larger answer.
func padding(n int) rawAttr { return rawAttr{stun.AttrPadding, make([]byte, n)} }

// TestHandlerUnderstood: attributes a Binding server understands or may
// ignore do not make it refuse the request.
func TestHandlerUnderstood(t *testing.T) {
	tests := []struct {
		name    string
		setters []stun.Setter
	}{
		{"comprehension-optional unknown", []stun.Setter{rawAttr{0xC0DE, []byte("whatever")}}},
		{"username and message-integrity", []stun.Setter{stun.NewUsername("a:b"), stun.NewShortTermIntegrity("pw"), stun.Fingerprint}},
		{"pre-RFC 5389 xor-mapped-address", []stun.Setter{rawAttr{0x8020, make([]byte, 8)}}},
		{"padding", []stun.Setter{padding(64), stun.Fingerprint}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := testHandler(true)
			in := message(t, stun.BindingRequest, append([]stun.Setter{padding(64)}, tt.setters...)...)
			out, _, ok := h.handle(newScratch(), in, testClient, 0)
			require.True(t, ok)
			assert.Equal(t, stun.BindingSuccess, decode(t, out).Type)
		})
	}
}

func TestHandlerDrops(t *testing.T) {
	valid := message(t, stun.BindingRequest, stun.Fingerprint)
	mutate := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), valid...))
	}
	// An attribute whose length runs past the end of the message.
	overrun := message(t, stun.BindingRequest, rawAttr{0x8001, nil})
	binary.BigEndian.PutUint16(overrun[22:24], 200)
	rfc3489 := mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[4:8], 0x01020304); return b })
	tests := []struct {
		name string
		in   []byte
		want func(Drops) uint64
	}{
		{"empty", nil, func(d Drops) uint64 { return d.NotSTUN }},
		{"short", valid[:19], func(d Drops) uint64 { return d.NotSTUN }},
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), func(d Drops) uint64 { return d.NotSTUN }},
		{"first bits set", mutate(func(b []byte) []byte { b[0] |= 0x80; return b }), func(d Drops) uint64 { return d.NotSTUN }},
		{"rfc3489 no cookie", rfc3489, func(d Drops) uint64 { return d.NotSTUN }},
		{"wireguard handshake", append([]byte{1, 0, 0, 0}, make([]byte, 144)...), func(d Drops) uint64 { return d.NotSTUN }},
		{"length too long", mutate(func(b []byte) []byte { binary.BigEndian.PutUint16(b[2:4], 12); return b }), func(d Drops) uint64 { return d.Malformed }},
		{"trailing bytes", append(append([]byte(nil), valid...), 0, 0, 0, 0), func(d Drops) uint64 { return d.Malformed }},
		{"length not multiple of 4", mutate(func(b []byte) []byte {
			binary.BigEndian.PutUint16(b[2:4], 7)
			return append(b[:20], make([]byte, 7)...)
		}), func(d Drops) uint64 { return d.Malformed }},
		{"attribute overruns message", overrun, func(d Drops) uint64 { return d.Malformed }},
		{"bad fingerprint", mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), func(d Drops) uint64 { return d.BadFingerprint }},
		{"fingerprint not last", message(t, stun.BindingRequest, stun.Fingerprint, stun.NewSoftware("x")), func(d Drops) uint64 { return d.BadFingerprint }},
		{"fingerprint after integrity garbage", message(t, stun.BindingRequest, stun.NewShortTermIntegrity("pw"), stun.Fingerprint, stun.NewSoftware("x")), func(d Drops) uint64 { return d.BadFingerprint }},
		{"indication", message(t, stun.NewType(stun.MethodBinding, stun.ClassIndication)), func(d Drops) uint64 { return d.NotRequest }},
		{"success response", message(t, stun.BindingSuccess, &stun.XORMappedAddress{IP: testClient.Addr().AsSlice(), Port: 1}), func(d Drops) uint64 { return d.NotRequest }},
		{"error response", message(t, stun.BindingError, stun.CodeBadRequest), func(d Drops) uint64 { return d.NotRequest }},
		{"allocate request", message(t, stun.NewType(stun.MethodAllocate, stun.ClassRequest)), func(d Drops) uint64 { return d.UnsupportedMethod }},
		{"oversize", message(t, stun.BindingRequest, rawAttr{0xC000, make([]byte, maxDatagram)}), func(d Drops) uint64 { return d.Oversize }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := testHandler(true)
			out, _, ok := h.handle(newScratch(), tt.in, testClient, 0)
			assert.False(t, ok, "answered with %x", out)
			st := h.stats.snapshot()
			assert.Equal(t, uint64(1), st.Datagrams)
			assert.Equal(t, uint64(1), st.Dropped.Total(), "%+v", st.Dropped)
			assert.Equal(t, uint64(1), tt.want(st.Dropped), "%+v", st.Dropped)
			assert.Zero(t, st.Requests)
		})
	}
}

// TestHandlerDropsUnaddressable: a source the server cannot answer is
// dropped (the read loop never passes one; the fuzzer might).
func TestHandlerDropsUnaddressable(t *testing.T) {
	h := testHandler(false)
	_, _, ok := h.handle(newScratch(), message(t, stun.BindingRequest), netip.AddrPort{}, 0)
	assert.False(t, ok)
	assert.Equal(t, uint64(1), h.stats.snapshot().Dropped.Malformed)
}

func TestHandlerAllocs(t *testing.T) {
	h := testHandler(true)
	sc := newScratch()
	in := message(t, stun.BindingRequest, changeRequest(flagChangePort), stun.Fingerprint)
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, ok := h.handle(sc, in, testClient, 0); !ok {
			t.Fatal("dropped")
		}
	})
	assert.Zero(t, allocs, "allocations per Binding request")
}
