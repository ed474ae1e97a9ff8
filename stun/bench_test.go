package stun

import (
	"testing"

	"github.com/pion/stun/v4"
)

// BenchmarkBinding measures the handler alone, no sockets: a Binding
// request padded for the full response, and one with FINGERPRINT only,
// which gets XOR-MAPPED-ADDRESS alone (the answer is sized to the request).
func BenchmarkBinding(b *testing.B) {
	for _, bc := range []struct {
		name    string
		rfc5780 bool
		setters []stun.Setter
	}{
		{"rfc8489", false, []stun.Setter{padding(64), stun.Fingerprint}},
		{"rfc5780-change-request", true, []stun.Setter{changeRequest(flagChangeIP | flagChangePort), padding(64), stun.Fingerprint}},
		{"rfc5780-unpadded", true, []stun.Setter{stun.Fingerprint}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := testHandler(bc.rfc5780)
			sc := newScratch()
			in := message(b, stun.BindingRequest, bc.setters...)
			b.ReportAllocs()
			for b.Loop() {
				if _, _, ok := h.handle(sc, in, testClient, 0); !ok {
					b.Fatal("request dropped")
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}
