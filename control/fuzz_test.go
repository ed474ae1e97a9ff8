package control

import (
	"testing"

	"github.com/latticelab/lattice/key"
)

// FuzzDecodeRequest: registration bodies from the network never panic the
// parser, and whatever it accepts is valid.
func FuzzDecodeRequest(f *testing.F) {
	k := key.Public{1, 2, 3}
	f.Add([]byte(`{"token":"` + testToken + `","name":"laptop","public_key":"` + k.String() + `"}`))
	f.Add([]byte(`{"token":"x","name":"Bad","public_key":"AAAA"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRequest(b)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted an invalid request: %v", err)
		}
	})
}
