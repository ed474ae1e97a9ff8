package dns

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"
)

// TestParseAAAA: the answers of a response to our query, and exact
// errors for everything else.
func TestParseAAAA(t *testing.T) {
	s, err := New(Config{DNS64: prefix64, Records: map[string][]netip.Addr{"server.lab": addrs("203.0.113.100"), "v6.lab": addrs("2001:db8::1")}})
	require.NoError(t, err)
	answer := func(id uint16, name string, typ dnsmessage.Type) []byte {
		b, err := s.Answer(query(t, id, name, typ))
		require.NoError(t, err)
		return b
	}
	for _, tc := range []struct {
		name    string
		b       []byte
		want    []netip.Addr
		wantErr string
	}{
		{"synthesized", answer(5, "server.lab.", dnsmessage.TypeAAAA), addrs("64:ff9b::cb00:7164"), ""},
		{"native", answer(5, "v6.lab.", dnsmessage.TypeAAAA), addrs("2001:db8::1"), ""},
		{"other id", answer(6, "v6.lab.", dnsmessage.TypeAAAA), nil, "answers another query"},
		{"nxdomain", answer(5, "nope.lab.", dnsmessage.TypeAAAA), nil, "server answered RCodeNameError"},
		{"A only", answer(5, "server.lab.", dnsmessage.TypeA), nil, "no AAAA records"},
		{"a query", query(t, 5, "v6.lab.", dnsmessage.TypeAAAA), nil, "a query, not a response"},
		{"junk", []byte{1, 2, 3}, nil, "bad response: unpacking header: bits: insufficient data for base length type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAAAA(tc.b, 5)
			if tc.wantErr != "" {
				assert.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// FuzzParseAAAA: any bytes parse or fail, never panic, and what parses
// holds only IPv6 addresses.
func FuzzParseAAAA(f *testing.F) {
	s, err := New(Config{DNS64: prefix64, Records: map[string][]netip.Addr{"server.lab": addrs("203.0.113.100")}})
	if err != nil {
		f.Fatal(err)
	}
	b, err := s.Answer(query(f, 1, "server.lab.", dnsmessage.TypeAAAA))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{0, 1, 0x81, 0x80, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseAAAA(b, 1)
		if err == nil && len(got) == 0 {
			t.Fatal("no error and no addresses")
		}
		for _, a := range got {
			if !a.Is6() {
				t.Fatalf("%v is not IPv6", a)
			}
		}
	})
}
