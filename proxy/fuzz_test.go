package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// FuzzSOCKS5Handshake plays arbitrary bytes as the client of a SOCKS5
// handshake over net.Pipe, with and without credentials. hold keeps the
// client's end open after writing, so the server must give up by its
// handshake deadline; otherwise the client closes at once. Whatever the
// input: no panic, the server is done within the deadline plus slack,
// and what it sends is a well-formed sequence of SOCKS5 answers in which
// authentication succeeds, and the Dialer is reached, only with the right
// credentials.
func FuzzSOCKS5Handshake(f *testing.F) {
	auth := authMsg(0, testCreds.Username, testCreds.Password)
	for _, seed := range [][]byte{
		nil,
		{5, 1, 0},
		{4, 1, 0, 80, 127, 0, 0, 1, 0},
		append([]byte{5, 1, 0, 5, 1, 0}, ipDst("127.0.0.1", 80)...),
		append([]byte{5, 1, 0, 5, 1, 0}, ipDst("2001:db8::1", 443)...),
		append([]byte{5, 1, 0, 5, 1, 0}, nameDst("some-name", 80)...),
		append([]byte{5, 1, 0, 5, 1, 0}, nameDst("denied.test", 80)...),
		append([]byte{5, 1, 0, 5, 3, 0}, ipDst("0.0.0.0", 0)...),
		append([]byte{5, 1, 0, 5, 2, 0}, ipDst("127.0.0.1", 80)...),
		append(bytes.Clone(auth), append([]byte{5, 1, 0}, nameDst("some-name", 80)...)...),
		authMsg(0, "agent", "wrong"),
		{5, 1, 0, 5, 1, 0, 0xff},
		{5, 1, 0, 5, 1, 0, 3, 0, 0, 80},
	} {
		f.Add(false, false, seed)
		f.Add(true, false, seed)
		f.Add(true, true, seed)
	}
	const timeout = 20 * time.Millisecond
	f.Fuzz(func(t *testing.T, withCreds, hold bool, in []byte) {
		var dials atomic.Int32
		cfg := fuzzConfig(&dials, withCreds, timeout)
		s, err := NewSOCKS5(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()

		client, server := net.Pipe()
		served := make(chan struct{})
		go func() {
			defer close(served)
			s.serveSOCKS(server)
			_ = server.Close()
		}()
		var out []byte
		read := make(chan struct{})
		go func() {
			defer close(read)
			out, _ = io.ReadAll(client)
		}()
		// A pipe write returns once the server has read every byte, or
		// stopped reading.
		_, _ = client.Write(in)
		if !hold {
			_ = client.Close()
		}
		select {
		case <-served:
		case <-time.After(timeout + 2*time.Second):
			t.Fatalf("server still busy %v after the input was consumed", timeout+2*time.Second)
		}
		_ = client.Close()
		<-read
		checkSOCKSAnswers(t, withCreds, in, out, dials.Load() > 0)
	})
}

// checkSOCKSAnswers checks the server's side of a handshake: method
// selection, then (with credentials) the RFC 1929 status, then one reply.
// A closed client may have cut it short anywhere.
func checkSOCKSAnswers(t *testing.T, withCreds bool, in, out []byte, dialed bool) {
	t.Helper()
	if len(out) == 0 {
		if dialed && withCreds {
			t.Fatal("dialed without authenticating")
		}
		return
	}
	if out[0] != socksVersion {
		t.Fatalf("answer % x does not start with version 5", out)
	}
	if len(out) < 2 {
		return
	}
	method, rest := out[1], out[2:]
	switch {
	case method == methodNoAcceptable:
		if len(rest) != 0 || dialed {
			t.Fatalf("answers % x continue after refusing every method", out)
		}
		return
	case withCreds && method != methodUserPass, !withCreds && method != methodNoAuth:
		t.Fatalf("method 0x%02x selected (credentials configured: %v)", method, withCreds)
	}
	if withCreds {
		if len(rest) < 2 {
			if dialed {
				t.Fatal("dialed without authenticating")
			}
			return
		}
		if rest[0] != authVersion {
			t.Fatalf("auth status % x", rest[:2])
		}
		ok := rest[1] == authSuccess
		if ok != rightCreds(in) {
			t.Fatalf("auth status %d for input % x", rest[1], in)
		}
		if !ok && (len(rest) != 2 || dialed) {
			t.Fatalf("answers % x continue after refused credentials", out)
		}
		rest = rest[2:]
	}
	if len(rest) > 0 && (rest[0] != socksVersion || len(rest) > 4+1+255+2) {
		t.Fatalf("malformed reply % x", rest)
	}
}

// rightCreds reports whether a handshake's RFC 1929 request carries the
// test credentials.
func rightCreds(in []byte) bool {
	if len(in) < 2 || len(in) < 2+int(in[1]) {
		return false
	}
	r := in[2+int(in[1]):]
	field := func() (string, bool) {
		if len(r) < 1 || len(r) < 1+int(r[0]) {
			return "", false
		}
		f := string(r[1 : 1+int(r[0])])
		r = r[1+int(r[0]):]
		return f, true
	}
	if len(r) < 1 || r[0] != authVersion {
		return false
	}
	r = r[1:]
	user, uok := field()
	pass, pok := field()
	return uok && pok && user == testCreds.Username && pass == testCreds.Password
}

// FuzzUDPHeader checks the datagram header parser: no panic; an error
// from the known set; otherwise the payload is the input's tail and the
// header the server would write back for the destination parses to the
// same destination, byte for byte the input's (name lowercased) when that
// was canonical.
func FuzzUDPHeader(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 10, 0, 0, 1, 0, 53, 'q'})
	f.Add(append([]byte{0, 0, 0}, ipDst("2001:db8::1", 443)...))
	f.Add(append([]byte{0, 0, 0}, ipDst("::ffff:10.0.0.1", 53)...))
	f.Add(append(append([]byte{0, 0, 0}, nameDst("dns.example", 53)...), "query"...))
	f.Add(append([]byte{0, 0, 0}, nameDst("10.0.0.1", 53)...))
	f.Add([]byte{0, 0, 1, 1, 10, 0, 0, 1, 0, 53})
	f.Add([]byte{0, 0, 0, 3, 255})
	f.Fuzz(func(t *testing.T, in []byte) {
		dst, payload, err := parseUDPHeader(in)
		if err != nil {
			for _, known := range []error{errTruncated, errFragment, errATYP, errBadHost} {
				if errors.Is(err, known) {
					return
				}
			}
			t.Fatalf("unexpected error %v", err)
		}
		if !bytes.HasSuffix(in, payload) || len(payload) > len(in)-4 {
			t.Fatalf("payload % x is not the tail of % x", payload, in)
		}
		hdr := appendUDPHeader(nil, dst)
		dst2, payload2, err := parseUDPHeader(append(bytes.Clone(hdr), payload...))
		if err != nil || dst2 != dst || !bytes.Equal(payload2, payload) {
			t.Fatalf("re-encoded header % x parses to %v %v %v, want %v", hdr, dst2, payload2, err, dst)
		}
		if hdr[3] != in[3] || len(in)-len(payload) != len(hdr) {
			return // not canonical: an IP as a name, an IPv4-mapped IPv6 address
		}
		want := bytes.Clone(in[2:len(hdr)])
		if want[1] == atypDomain {
			copy(want[3:], bytes.ToLower(want[3:3+want[2]])) // names are lowercased
		}
		if !bytes.Equal(hdr[2:], want) {
			t.Fatalf("canonical header % x re-encoded as % x", in[:len(hdr)], hdr)
		}
	})
}

// fuzzConfig is the fuzz targets' proxy configuration: every dial is
// counted in dials, a destination starting with "denied" is refused by
// policy, any other hangs up at once.
func fuzzConfig(dials *atomic.Int32, withCreds bool, timeout time.Duration) Config {
	cfg := Config{
		Dial: func(_ context.Context, _, address string) (net.Conn, error) {
			dials.Add(1)
			if strings.HasPrefix(address, "denied") {
				return nil, ErrDenied
			}
			up, peer := net.Pipe()
			_ = peer.Close() // the destination hangs up at once
			return up, nil
		},
		HandshakeTimeout: timeout,
		DialTimeout:      timeout,
	}
	if withCreds {
		cfg.Credentials = testCreds
	}
	return cfg
}
