package controlapi

import (
	"regexp"
	"testing"
)

// nameRE is the DNS-label rule ValidName writes out.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// FuzzValidName: ValidName accepts exactly what the regular expression
// of a DNS label does.
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"web-1", "a", "-a", "a-", "A", "a_b", "", "a\n", "0123456789012345678901234567890123456789012345678901234567890123", "x.y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidName(s), nameRE.MatchString(s); got != want {
			t.Fatalf("ValidName(%q) = %t, the label rule says %t", s, got, want)
		}
	})
}
