package stun

import (
	"net/netip"
	"testing"

	"github.com/pion/stun/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHandlerAmplification measures bytes out / bytes in for small Binding
// requests. Before answers were sized to requests, a bare 20-byte request
// got 64 bytes back (3.2×) and 88 from an RFC 5780 server (4.4×). Now no
// answer is larger than its request, except XOR-MAPPED-ADDRESS alone for a
// request too small to hold even that.
func TestHandlerAmplification(t *testing.T) {
	v6 := netip.MustParseAddrPort("[2001:db8::7]:40000")
	tests := []struct {
		name    string
		rfc5780 bool
		src     netip.AddrPort
		setters []stun.Setter
		// wantFactor is bytes out / bytes in.
		wantFactor float64
	}{
		{name: "bare", src: testClient, wantFactor: 32.0 / 20},
		{name: "bare rfc5780", rfc5780: true, src: testClient, wantFactor: 32.0 / 20},
		{name: "bare ipv6", rfc5780: true, src: v6, wantFactor: 44.0 / 20},
		{name: "fingerprint", src: testClient, setters: []stun.Setter{stun.Fingerprint}, wantFactor: 32.0 / 28},
		{name: "change-request", rfc5780: true, src: testClient, setters: []stun.Setter{changeRequest(flagChangeIP | flagChangePort)}, wantFactor: 32.0 / 28},
		{name: "change-request and fingerprint", rfc5780: true, src: testClient, setters: []stun.Setter{changeRequest(flagChangePort), stun.Fingerprint}, wantFactor: 32.0 / 36},
		// A padded request gets a padded answer of its own size (RFC 5780
		// section 6, bounded by the request).
		{name: "padded", rfc5780: true, src: testClient, setters: []stun.Setter{padding(256), stun.Fingerprint}, wantFactor: 1},
		{name: "large software", rfc5780: true, src: testClient, setters: []stun.Setter{stun.NewSoftware(string(make([]byte, 700)))}, wantFactor: 88.0 / 724},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := testHandler(tt.rfc5780)
			in := message(t, stun.BindingRequest, tt.setters...)
			out, _, ok := h.handle(newScratch(), in, tt.src, 0)
			require.True(t, ok, "dropped: %+v", h.stats.snapshot())
			factor := float64(len(out)) / float64(len(in))
			t.Logf("%d bytes in, %d out: %.2f×", len(in), len(out), factor)
			assert.InDelta(t, tt.wantFactor, factor, 0.001, "bytes out / bytes in")
			assert.LessOrEqual(t, len(out), max(len(in), minAnswer(tt.src.Addr())))

			m := new(stun.Message)
			require.NoError(t, stun.Decode(out, m))
			r, ours, err := parseResponse(out, m.TransactionID)
			require.True(t, ours)
			require.NoError(t, err)
			assert.Equal(t, tt.src, r.mapped, "every answer carries the mapped address")
		})
	}
}

// TestHandlerPaddedAnswer: a request padded to the size of the full answer
// gets every attribute; one byte less (four, in STUN's units) loses the
// last in priority, SOFTWARE, and is counted as trimmed.
func TestHandlerPaddedAnswer(t *testing.T) {
	h := testHandler(true)
	full := 88 // header, 4 address attributes, SOFTWARE "lattice", FINGERPRINT
	req := func(size int) []byte {
		m, err := stun.Build(stun.TransactionID, stun.BindingRequest)
		require.NoError(t, err)
		pad(m, fingerprintLen, size)
		require.NoError(t, stun.Fingerprint.AddTo(m))
		return m.Raw
	}
	in := req(full)
	require.Len(t, in, full)
	out, _, ok := h.handle(newScratch(), in, testClient, 0)
	require.True(t, ok)
	assert.Len(t, out, full)
	m := decode(t, out)
	for _, a := range []stun.AttrType{stun.AttrXORMappedAddress, stun.AttrMappedAddress, stun.AttrResponseOrigin, stun.AttrOtherAddress, stun.AttrSoftware} {
		assert.True(t, m.Contains(a), "%v missing", a)
	}
	assert.Zero(t, h.stats.snapshot().Trimmed)

	out, _, ok = h.handle(newScratch(), req(full-4), testClient, 0)
	require.True(t, ok)
	m = decode(t, out)
	assert.False(t, m.Contains(stun.AttrSoftware), "SOFTWARE in a trimmed answer")
	assert.True(t, m.Contains(stun.AttrMappedAddress))
	assert.Equal(t, uint64(1), h.stats.snapshot().Trimmed)
}

// TestHandlerSmallErrorUnanswered: an error response that cannot be made
// as small as its request is not sent, and counted.
func TestHandlerSmallErrorUnanswered(t *testing.T) {
	tests := []struct {
		name    string
		rfc5780 bool
		setters []stun.Setter
		want    func(Stats) uint64
	}{
		{"change-request without alternate", false, []stun.Setter{changeRequest(flagChangePort)}, func(s Stats) uint64 { return s.UnknownAttribute }},
		{"unknown attribute", true, []stun.Setter{rawAttr{0x7F01, nil}}, func(s Stats) uint64 { return s.UnknownAttribute }},
		{"short change-request", true, []stun.Setter{rawAttr{stun.AttrChangeRequest, nil}}, func(s Stats) uint64 { return s.BadRequest }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := testHandler(tt.rfc5780)
			out, _, ok := h.handle(newScratch(), message(t, stun.BindingRequest, tt.setters...), testClient, 0)
			assert.False(t, ok, "answered with %d bytes", len(out))
			st := h.stats.snapshot()
			assert.Equal(t, uint64(1), st.Unanswered)
			assert.Equal(t, uint64(1), tt.want(st))
		})
	}
	// With the fingerprint the 420 fits, without its reason phrase and
	// FINGERPRINT.
	h := testHandler(false)
	in := message(t, stun.BindingRequest, changeRequest(flagChangePort), stun.Fingerprint)
	out, _, ok := h.handle(newScratch(), in, testClient, 0)
	require.True(t, ok)
	assert.LessOrEqual(t, len(out), len(in))
	m := new(stun.Message)
	require.NoError(t, stun.Decode(out, m))
	_, _, err := parseResponse(out, m.TransactionID)
	var er *ErrorResponse
	require.ErrorAs(t, err, &er)
	assert.Equal(t, 420, er.Code)
	assert.Equal(t, []uint16{0x0003}, er.Unknown)
}
