package controlapi

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
)

func TestParseEndpoint(t *testing.T) {
	fp := strings.Repeat("0f", 32)
	for _, tc := range []struct {
		name, url string
		want      endpoint
		wantErr   string
	}{
		{"loopback nats", "nats://127.0.0.1:4222", endpoint{scheme: "nats", host: "127.0.0.1:4222"}, ""},
		{"loopback 127/8", "http://127.9.8.7:80/base/", endpoint{scheme: "http", host: "127.9.8.7:80", path: "/base"}, ""},
		{"loopback v6", "nats://[::1]:4222", endpoint{scheme: "nats", host: "[::1]:4222"}, ""},
		{"loopback mapped", "nats://[::ffff:127.0.0.1]:4222", endpoint{scheme: "nats", host: "[::ffff:127.0.0.1]:4222"}, ""},
		{"localhost", "http://LocalHost:8080", endpoint{scheme: "http", host: "LocalHost:8080"}, ""},
		{"plaintext off loopback", "nats://10.0.0.1:4222", endpoint{}, ErrPlaintext.Error()},
		{"plaintext name", "http://control.example.net:8080", endpoint{}, ErrPlaintext.Error()},
		{"plaintext unspecified", "nats://0.0.0.0:4222", endpoint{}, ErrPlaintext.Error()},
		{"insecure", "nats://10.0.0.1:4222?insecure=1", endpoint{scheme: "nats", host: "10.0.0.1:4222", insecure: true}, ""},
		{"insecure no", "nats://10.0.0.1:4222?insecure=0", endpoint{}, ErrPlaintext.Error()},
		{"insecure bad", "nats://10.0.0.1:4222?insecure=maybe", endpoint{}, `insecure="maybe": want 1 or 0`},
		{"tls", "tls://10.0.0.1:4222", endpoint{scheme: "tls", host: "10.0.0.1:4222"}, ""},
		{"tls pin colons upper", "TLS://10.0.0.1:4222?fingerprint=" + strings.ToUpper(strings.Repeat("0f:", 31)+"0f"), endpoint{scheme: "tls", host: "10.0.0.1:4222", pin: fp}, ""},
		{"https pin", "https://h.example:8443/?fingerprint=" + fp, endpoint{scheme: "https", host: "h.example:8443", pin: fp}, ""},
		{"pin short", "tls://10.0.0.1:4222?fingerprint=abcd", endpoint{}, `fingerprint "abcd": want 32 hex bytes`},
		{"pin on plaintext", "nats://127.0.0.1:4222?fingerprint=" + fp, endpoint{}, "a fingerprint needs tls:// or https://"},
		{"unknown param", "tls://10.0.0.1:4222?token=x", endpoint{}, `unknown parameter "token"`},
		{"control key", "tls://10.0.0.1:4222?key=" + strings.Repeat("ab", 32), endpoint{scheme: "tls", host: "10.0.0.1:4222", controlKey: key.Public(bytes.Repeat([]byte{0xab}, 32))}, ""},
		{"control key and pin", "https://h:1?fingerprint=" + fp + "&key=" + strings.Repeat("AB", 32), endpoint{scheme: "https", host: "h:1", pin: fp, controlKey: key.Public(bytes.Repeat([]byte{0xab}, 32))}, ""},
		{"control key short", "tls://10.0.0.1:4222?key=abcd", endpoint{}, "key: want control's register key, 64 hex digits"},
		{"control key base64", "tls://10.0.0.1:4222?key=" + key.Public(bytes.Repeat([]byte{0xab}, 32)).String(), endpoint{}, "key: want control's register key, 64 hex digits"},
		{"control key zero", "tls://10.0.0.1:4222?key=" + strings.Repeat("00", 32), endpoint{}, "key: want control's register key, 64 hex digits"},
		{"scheme", "ftp://10.0.0.1", endpoint{}, `scheme "ftp"`},
		{"no scheme", "10.0.0.1:4222", endpoint{}, "control URL"},
		{"no host", "tls://", endpoint{}, "no host"},
		{"user info", "tls://join:secret@10.0.0.1:4222", endpoint{}, "user info does not belong in the URL"},
		{"unparsable with user info", "tls://join:secret@10.0.0.1:4222/%zz", endpoint{}, `invalid URL escape "%zz"`},
		{"nats path", "tls://10.0.0.1:4222/x", endpoint{}, "a NATS URL has no path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseEndpoint(tc.url)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.NotContains(t, err.Error(), "secret", "a URL's user info is not repeated")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, *got)
		})
	}
}

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.255.0.9": true, "::1": true, "[::1]": true, "localhost": true, "::ffff:127.0.0.1": true,
		"128.0.0.1": false, "10.0.0.1": false, "0.0.0.0": false, "::": false, "": false, "localhost.example": false,
		"192.0.2.1": false, "fe80::1": false, "notlocalhost": false,
	} {
		assert.Equal(t, want, IsLoopbackHost(host), host)
	}
}

func TestInherit(t *testing.T) {
	fp := strings.Repeat("0f", 32)
	mustEP := func(u string) *endpoint {
		e, err := parseEndpoint(u)
		require.NoError(t, err)
		return e
	}
	for _, tc := range []struct {
		name, reg, advertised, want string
	}{
		{"same host gets the pin", "https://10.0.0.1:8443?fingerprint=" + fp, "tls://10.0.0.1:4222", "tls://10.0.0.1:4222?fingerprint=" + fp},
		{"other host does not", "https://10.0.0.1:8443?fingerprint=" + fp, "tls://nats.example:4222", "tls://nats.example:4222"},
		{"own pin kept", "tls://10.0.0.1:4222?fingerprint=" + fp, "tls://10.0.0.1:4222?fingerprint=" + strings.Repeat("aa", 32), "tls://10.0.0.1:4222?fingerprint=" + strings.Repeat("aa", 32)},
		{"plaintext gets no pin", "tls://10.0.0.1:4222?fingerprint=" + fp, "nats://10.0.0.1:4222", "nats://10.0.0.1:4222"},
		{"insecure carried", "nats://10.0.0.1:4222?insecure=1", "nats://10.0.0.1:4222", "nats://10.0.0.1:4222?insecure=1"},
		{"nothing to carry", "nats://127.0.0.1:4222", "nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"empty stays empty", "nats://127.0.0.1:4222", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, mustEP(tc.reg).inherit(tc.advertised))
		})
	}
}

func TestWithTrust(t *testing.T) {
	fp := strings.Repeat("0f", 32)
	u, err := WithTrust("tls://10.0.0.1:4222", fp, false)
	require.NoError(t, err)
	assert.Equal(t, "tls://10.0.0.1:4222?fingerprint="+fp, u)
	u, err = WithTrust("nats://10.0.0.1:4222", "", true)
	require.NoError(t, err)
	assert.Equal(t, "nats://10.0.0.1:4222?insecure=1", u)
	_, err = WithTrust("nats://10.0.0.1:4222", "", false)
	require.ErrorIs(t, err, ErrPlaintext)
	_, err = WithTrust("nats://127.0.0.1:4222", fp, false)
	require.ErrorContains(t, err, "a fingerprint needs tls://")
}

func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{
		"nats://127.0.0.1:4222", "tls://10.0.0.1:4222?fingerprint=" + strings.Repeat("0f", 32),
		"https://h:1/?insecure=1", "http://[::1]:80/a/b", "tls://u:p@h:1", "nats://%zz", "tls://h:1?fingerprint=zz&insecure",
		"", "://", "tls://[::ffff:127.0.0.1]:1", "nats://127.0.0.1:1?key=" + strings.Repeat("0f", 32), "tls://h:1?key=zz&key=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := parseEndpoint(s)
		if err != nil {
			return
		}
		if !e.isTLS() && !e.insecure && !IsLoopbackHost(strings.Trim(hostOnly(e.host), "[]")) {
			t.Fatalf("%q: plaintext to %q accepted", s, e.host)
		}
		if e.pin != "" && len(e.pin) != 64 {
			t.Fatalf("%q: pin %q", s, e.pin)
		}
		if k := URLControlKey(s); k != e.controlKey {
			t.Fatalf("%q: URLControlKey %v, parsed %v", s, k, e.controlKey)
		}
		_ = e.inherit(s)
	})
}

func hostOnly(hostport string) string {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	return h
}
