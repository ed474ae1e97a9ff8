package stun_test

import (
	"encoding/json"
	"testing"

	"github.com/latticelab/lattice/stun"
)

// FuzzReportJSON: any input either fails to parse as a netcheck report or
// parses to one that marshals and parses back the same.
func FuzzReportJSON(f *testing.F) {
	f.Add([]byte(`{"udp":true,"public":"203.0.113.10:4000","mapping":"endpoint-independent","filtering":"address-dependent","servers":[{"addr":"203.0.113.100:3478","rtt_ns":1000}]}`))
	f.Add([]byte(`{"mapping":"nonsense"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r stun.Report
		if json.Unmarshal(b, &r) != nil {
			return
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("marshal %+v: %v", r, err)
		}
		var back stun.Report
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("re-parse %s: %v", out, err)
		}
	})
}
