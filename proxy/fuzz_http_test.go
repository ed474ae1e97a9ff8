package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// goodAuth is the Proxy-Authorization value for testCreds.
var goodAuth = "Basic " + base64.StdEncoding.EncodeToString([]byte(testCreds.Username+":"+testCreds.Password))

// FuzzProxyAuthorization puts arbitrary Proxy-Authorization values to the
// HTTP proxy's check. Whatever the value: no panic; it passes only if it
// carries exactly the right username and password; every refusal is
// reported once, with one of the three reasons, naming a username only
// for wrong credentials, and that one the value's own.
func FuzzProxyAuthorization(f *testing.F) {
	for _, seed := range []string{
		"", goodAuth, "basic " + goodAuth[len("Basic "):], "BASIC  " + goodAuth[len("Basic "):] + " ",
		"Basic", "Basic ", "Bearer abc", "Basic !!!!", "Basic " + base64.StdEncoding.EncodeToString([]byte("agent")),
		"Basic " + base64.StdEncoding.EncodeToString([]byte("agent:wrong")),
		"Basic " + base64.StdEncoding.EncodeToString([]byte(":")),
		"Basic " + base64.StdEncoding.EncodeToString([]byte("agent:s3cret:extra")),
		"Basic " + base64.RawStdEncoding.EncodeToString([]byte("agent:s3cret")),
		"Basic " + base64.URLEncoding.EncodeToString([]byte("agent:s3cret\xff")),
		"Basic\t" + goodAuth[len("Basic "):],
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		var failures []LoginFailure
		s, err := NewHTTP(Config{
			Dial:        func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("no dial") },
			Credentials: testCreds,
			LoginFailed: func(lf LoginFailure) { failures = append(failures, lf) },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r, _ := http.NewRequest(http.MethodConnect, "http://example.test:443", nil)
		if value != "" {
			r.Header["Proxy-Authorization"] = []string{value}
		}
		ok := s.authorized(r, nil)
		if ok {
			if len(failures) != 0 {
				t.Fatalf("authorized %q and reported a failure %+v", value, failures)
			}
			scheme, cred, _ := strings.Cut(value, " ")
			raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
			if !strings.EqualFold(scheme, "basic") || err != nil || string(raw) != testCreds.Username+":"+testCreds.Password {
				t.Fatalf("authorized %q, which does not carry the credentials", value)
			}
			return
		}
		if len(failures) != 1 {
			t.Fatalf("refused %q with %d reports, want 1", value, len(failures))
		}
		lf := failures[0]
		switch lf.Reason {
		case ReasonNoCredentials, ReasonMalformed:
			if lf.Username != "" {
				t.Fatalf("refused %q as %q naming user %q", value, lf.Reason, lf.Username)
			}
		case ReasonBadCredentials:
			if !strings.Contains(value, " ") {
				t.Fatalf("wrong credentials in %q, which has no scheme separator", value)
			}
			_, cred, _ := strings.Cut(value, " ")
			raw, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
			if user, _, _ := strings.Cut(string(raw), ":"); user != lf.Username {
				t.Fatalf("refused %q naming user %q, want %q", value, lf.Username, user)
			}
		default:
			t.Fatalf("refused %q for reason %q", value, lf.Reason)
		}
		if strings.Contains(lf.Username, testCreds.Password) && !strings.Contains(testCreds.Username, testCreds.Password) {
			if _, pass, _ := strings.Cut(lf.Username, ":"); pass != "" {
				t.Fatalf("a report carries the password: %+v", lf)
			}
		}
	})
}

// FuzzHTTPProxyRequest plays arbitrary bytes as a client of the HTTP proxy
// on a loopback connection, with and without credentials, then shuts its
// writing side. Whatever the input: no panic, the server hangs up within
// its handshake timeout plus slack, what it sends parses as HTTP/1.1
// responses, and with credentials it dials only for a request that
// carried them.
func FuzzHTTPProxyRequest(f *testing.F) {
	for _, seed := range []string{
		"",
		"CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n",
		"CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\nProxy-Authorization: " + goodAuth + "\r\n\r\nearly bytes",
		"GET http://some-name/x HTTP/1.1\r\nHost: some-name\r\nProxy-Authorization: " + goodAuth + "\r\n\r\n",
		"GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\nProxy-Authorization: " + goodAuth + "\r\n\r\n",
		"GET /relative HTTP/1.1\r\nHost: x\r\nProxy-Authorization: " + goodAuth + "\r\n\r\n",
		"CONNECT [::1]:0 HTTP/1.1\r\nHost: x\r\nProxy-Authorization: " + goodAuth + "\r\n\r\n",
		"CONNECT a:b:c HTTP/1.1\r\nHost: x\r\nProxy-Authorization: " + goodAuth + "\r\n\r\n",
		"POST http://some-name/ HTTP/1.1\r\nHost: some-name\r\nProxy-Authorization: " + goodAuth + "\r\nContent-Length: 5\r\n\r\nhello",
		"GET http://some-name/ HTTP/1.1\r\nHost: some-name\r\nProxy-Authorization: Basic !!\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://x/ HTTP/1.0\r\n\r\nGET http://y/ HTTP/1.0\r\n\r\n",
		"\x16\x03\x01\x00\x05hello",
	} {
		f.Add(false, []byte(seed))
		f.Add(true, []byte(seed))
	}
	const timeout = 50 * time.Millisecond
	f.Fuzz(func(t *testing.T, withCreds bool, in []byte) {
		var dials atomic.Int32
		cfg := fuzzConfig(&dials, withCreds, timeout)
		s, err := NewHTTP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan struct{})
		go func() {
			defer close(served)
			_ = s.Serve(ln)
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		client := c.(*net.TCPConn)
		_ = client.SetDeadline(time.Now().Add(timeout + 2*time.Second))
		_, _ = client.Write(in)
		_ = client.CloseWrite()
		out, err := io.ReadAll(client)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("server still talking %v after the client finished: %q", timeout+2*time.Second, in)
		}
		_ = client.Close()
		_ = s.Close()
		<-served
		checkHTTPAnswers(t, out)
		if withCreds && dials.Load() > 0 && !bytes.Contains(in, []byte(goodAuth[len("Basic "):])) {
			t.Fatalf("dialed for a request without the credentials: %q", in)
		}
	})
}

// checkHTTPAnswers parses what the proxy wrote as HTTP/1.1 responses; a
// tunnel's "200 Connection established" ends the HTTP part.
func checkHTTPAnswers(t *testing.T, out []byte) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(out))
	for {
		if _, err := br.Peek(1); err != nil {
			return
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return // cut short by the hang-up
			}
			t.Fatalf("answer is not HTTP: %v: %q", err, out)
		}
		if resp.StatusCode < 200 || resp.StatusCode > 599 {
			t.Fatalf("status %d: %q", resp.StatusCode, out)
		}
		if resp.StatusCode == http.StatusOK && resp.Status == "200 Connection established" {
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
