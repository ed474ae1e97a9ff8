package dns

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/net/dns/dnsmessage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var prefix64 = netip.MustParsePrefix("64:ff9b::/96")

func query(t testing.TB, id uint16, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	msg := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}},
	}
	b, err := msg.Pack()
	require.NoError(t, err)
	return b
}

// answer runs a query and returns the response's rcode and addresses.
func answer(t *testing.T, s *Server, name string, typ dnsmessage.Type) (dnsmessage.RCode, []netip.Addr) {
	t.Helper()
	b, err := s.Answer(query(t, 42, name, typ))
	require.NoError(t, err)
	var m dnsmessage.Message
	require.NoError(t, m.Unpack(b))
	assert.Equal(t, uint16(42), m.ID)
	assert.True(t, m.Response)
	require.Len(t, m.Questions, 1, "the question is echoed")
	var out []netip.Addr
	for _, a := range m.Answers {
		switch r := a.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, netip.AddrFrom4(r.A))
		case *dnsmessage.AAAAResource:
			out = append(out, netip.AddrFrom16(r.AAAA))
		}
		assert.Equal(t, uint32(60), a.Header.TTL)
	}
	return m.RCode, out
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestDNS64(t *testing.T) {
	s, err := New(Config{DNS64: prefix64, Records: map[string][]netip.Addr{
		"server.lab":  addrs("203.0.113.100"),
		"Dual.Lab.":   addrs("203.0.113.5", "2001:db8::5"),
		"v6only.lab.": addrs("2001:db8::6"),
	}})
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		want  []netip.Addr
	}{
		{"server.lab.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, addrs("203.0.113.100")},
		{"SERVER.lab.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, addrs("64:ff9b::cb00:7164")}, // synthesized
		{"dual.lab.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, addrs("2001:db8::5")},          // a real AAAA wins (RFC 6147 5.1.1)
		{"dual.lab.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, addrs("203.0.113.5")},
		{"v6only.lab.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, nil}, // NODATA
		{"server.lab.", dnsmessage.TypeMX, dnsmessage.RCodeSuccess, nil},
		{"nowhere.lab.", dnsmessage.TypeAAAA, dnsmessage.RCodeNameError, nil},
		{"ipv4only.arpa.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, addrs("192.0.0.170", "192.0.0.171")},
		{"ipv4only.arpa.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, addrs("64:ff9b::c000:aa", "64:ff9b::c000:ab")}, // RFC 7050 discovery
	} {
		rcode, got := answer(t, s, tc.name, tc.typ)
		assert.Equal(t, tc.rcode, rcode, "%s %v", tc.name, tc.typ)
		assert.Equal(t, tc.want, got, "%s %v", tc.name, tc.typ)
	}

	plain, err := New(Config{Records: map[string][]netip.Addr{"server.lab": addrs("203.0.113.100")}})
	require.NoError(t, err)
	rcode, got := answer(t, plain, "server.lab.", dnsmessage.TypeAAAA)
	assert.Equal(t, dnsmessage.RCodeSuccess, rcode)
	assert.Empty(t, got, "no DNS64 prefix: nothing synthesized")
}

func TestAnswerRefuses(t *testing.T) {
	s, err := New(Config{})
	require.NoError(t, err)
	_, err = s.Answer([]byte{1, 2, 3})
	assert.ErrorContains(t, err, "dns: parse header")
	resp, err := s.Answer(query(t, 1, "ipv4only.arpa.", dnsmessage.TypeA))
	require.NoError(t, err)
	_, err = s.Answer(resp)
	assert.EqualError(t, err, "dns: a response, not a query")

	// A header with a question count but no question: FORMERR.
	b, err := s.Answer([]byte{0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	require.NoError(t, err)
	var m dnsmessage.Message
	require.NoError(t, m.Unpack(b))
	assert.Equal(t, dnsmessage.RCodeFormatError, m.RCode)
	assert.Equal(t, uint16(7), m.ID)

	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{DNS64: netip.MustParsePrefix("64:ff9b::/64")}, "dns: dns64 prefix 64:ff9b::/64 is not an IPv6 /96 without host bits: invalid dns configuration"},
		{Config{Records: map[string][]netip.Addr{"a..b": addrs("10.0.0.1")}}, `dns: record name "a..b": not a domain name: invalid dns configuration`},
		{Config{Records: map[string][]netip.Addr{"a": {{}}}}, `dns: record "a": invalid address: invalid dns configuration`},
	} {
		_, err := New(tc.cfg)
		assert.ErrorIs(t, err, ErrInvalidConfig)
		assert.EqualError(t, err, tc.want)
	}
}

// FuzzAnswer feeds any bytes to Answer: no panic, and every response
// parses and carries the query's ID.
func FuzzAnswer(f *testing.F) {
	f.Add(query(f, 1, "server.lab.", dnsmessage.TypeAAAA))
	f.Add(query(f, 2, "ipv4only.arpa.", dnsmessage.TypeA))
	f.Add([]byte{0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	s, err := New(Config{DNS64: prefix64, Records: map[string][]netip.Addr{"server.lab": addrs("203.0.113.100")}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, q []byte) {
		b, err := s.Answer(q)
		if err != nil {
			if b != nil {
				t.Fatal("error with a response")
			}
			return
		}
		var m dnsmessage.Message
		if err := m.Unpack(b); err != nil {
			t.Fatalf("response does not parse: %v", err)
		}
		if len(q) < 2 || m.ID != uint16(q[0])<<8|uint16(q[1]) || !m.Response {
			t.Fatalf("response %+v does not answer the query", m.Header)
		}
		if len(b) > maxUDP {
			t.Fatalf("%d-byte response over UDP", len(b))
		}
	})
}
