package key

import (
	"encoding/base64"
	"strings"
	"testing"
)

func FuzzParsePublic(f *testing.F) {
	f.Add("1wNLXk6SC1Oiy7pwIkcnmjpYg27h6pq/Su+v1dU3n14=")
	f.Add("AAAA")
	f.Add("!!!")
	f.Add(base64.StdEncoding.EncodeToString(make([]byte, 33)))
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParsePublic(s)
		if err != nil {
			if !k.IsZero() {
				t.Fatalf("error %v with a non-zero key", err)
			}
			return
		}
		again, err := ParsePublic(k.String())
		if err != nil || again != k {
			t.Fatalf("%q parsed as %v, which does not parse back: %v", s, k, err)
		}
		var u Public
		if err := u.UnmarshalText([]byte(s)); err != nil || u != k {
			t.Fatalf("UnmarshalText(%q) = %v, %v; ParsePublic gave %v", s, u, err, k)
		}
	})
}

func FuzzParsePublicHex(f *testing.F) {
	f.Add(strings.Repeat("ab", 32))
	f.Add("abc")
	f.Add("zz")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParsePublicHex(s)
		if err != nil {
			return
		}
		if !strings.EqualFold(k.Hex(), s) {
			t.Fatalf("%q parsed as %s", s, k.Hex())
		}
	})
}

func FuzzParsePrivate(f *testing.F) {
	f.Add("KAirxhrgPmtRo5yhPIB6Kq35QHV4JLgshwU5ya2E1Hc=")
	f.Add("s3cr3t!!")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParsePrivate(s)
		if err != nil {
			if len(s) >= 4 && strings.Contains(err.Error(), s) {
				t.Fatalf("error quotes the secret input: %v", err)
			}
			return
		}
		again, err := ParsePrivate(k.RevealBase64())
		if err != nil || !again.Equal(k) {
			t.Fatalf("%q does not round-trip: %v", s, err)
		}
		_ = k.Public()
	})
}
