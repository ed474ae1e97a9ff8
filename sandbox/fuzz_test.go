package sandbox_test

import (
	"strings"
	"testing"

	"github.com/latticelab/lattice/sandbox"
)

// FuzzParseForward: any --forward value is accepted and prints back to an
// equivalent spec, or refused with an error naming it; never a panic.
func FuzzParseForward(f *testing.F) {
	for _, s := range []string{"8080=127.0.0.1:3000", "3000", "80=[::1]:8080", "=", "80=", "x=y:z", "65536=1.2.3.4:5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fw, err := sandbox.ParseForward(s)
		if err != nil {
			if !strings.Contains(err.Error(), "forward ") {
				t.Fatalf("error does not name the forward: %v", err)
			}
			return
		}
		again, err := sandbox.ParseForward(fw.String())
		if err != nil || again != fw {
			t.Fatalf("%q parsed to %v, which parses to %v, %v", s, fw, again, err)
		}
	})
}
