package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// backendSeen is what the destination HTTP server saw of a request.
type backendSeen struct {
	host, uri string
	header    http.Header
}

// backend runs a loopback HTTP server answering "hello <path>".
func backend(t *testing.T) (*httptest.Server, <-chan backendSeen) {
	t.Helper()
	seen := make(chan backendSeen, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- backendSeen{host: r.Host, uri: r.RequestURI, header: r.Header.Clone()}:
		default:
		}
		_, _ = io.WriteString(w, "hello "+r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

// proxyClient is an HTTP client using the proxy at proxyAddr.
func proxyClient(t *testing.T, proxyAddr string, user *url.Userinfo, tc *tls.Config) *http.Client {
	t.Helper()
	tr := &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: proxyAddr, User: user}),
		TLSClientConfig: tc,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: testTimeout}
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// rawHTTP sends req as is on a new connection to the proxy and returns
// the response, its body read, and the connection.
func rawHTTP(t *testing.T, proxyAddr, req string) (*http.Response, string, net.Conn, *bufio.Reader) {
	t.Helper()
	c := dial(t, proxyAddr)
	_, err := io.WriteString(c, req)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	body := ""
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(req, "CONNECT") {
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		body = string(b)
	}
	return resp, body, c, br
}

func TestHTTPForward(t *testing.T) {
	srv, seen := backend(t)
	port := portOf(t, srv.Listener.Addr().String())
	tn := newTestNet()
	_, proxyAddr := startHTTP(t, tn.config(testCreds))
	client := proxyClient(t, proxyAddr, url.UserPassword("agent", "s3cret"), nil)

	target := fmt.Sprintf("http://some-name:%d/path?q=1", port)
	req, err := http.NewRequest(http.MethodGet, target, nil)
	require.NoError(t, err)
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "dropped")
	req.Header.Set("Keep-Alive", "timeout=5")
	req.Header.Set("X-Keep", "kept")
	resp, err := client.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "hello /path", string(body))

	var got backendSeen
	select {
	case got = <-seen:
	case <-time.After(testTimeout):
		t.Fatal("the destination saw no request")
	}
	assert.Equal(t, fmt.Sprintf("some-name:%d", port), got.host)
	assert.Equal(t, "/path?q=1", got.uri, "origin form towards the destination")
	assert.Equal(t, "kept", got.header.Get("X-Keep"))
	for _, h := range []string{"X-Hop", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection"} {
		assert.Empty(t, got.header.Values(h), h)
	}
	attempts := tn.Attempts()
	require.Len(t, attempts, 1)
	assert.Equal(t, Attempt{Client: attempts[0].Client, Network: "tcp", Address: fmt.Sprintf("some-name:%d", port)}, attempts[0])
	assert.Equal(t, "127.0.0.1", attempts[0].Client.(*net.TCPAddr).IP.String())
}

// TestHTTPTargets checks how request targets reach the Dialer and the
// destination's Host header: normalised, default port added for the dial
// only.
func TestHTTPTargets(t *testing.T) {
	srv, seen := backend(t)
	port := itoa(portOf(t, srv.Listener.Addr().String()))
	tests := []struct {
		name, method, target string
		wantDialed, wantHost string
	}{
		{"name", "GET", "http://some-name:" + port + "/", "tcp some-name:" + port, "some-name:" + port},
		{"name lowercased", "GET", "http://Some-NAME:" + port + "/", "tcp some-name:" + port, "some-name:" + port},
		{"default port", "GET", "http://port80-name/", "tcp port80-name:80", "port80-name"},
		{"ipv6", "GET", "http://[2001:db8::1]:" + port + "/", "tcp [2001:db8::1]:" + port, "[2001:db8::1]:" + port},
		{"ipv4-mapped ipv6", "GET", "http://[::ffff:127.0.0.1]:" + port + "/", "tcp 127.0.0.1:" + port, "127.0.0.1:" + port},
		{"connect ipv6", "CONNECT", "[2001:db8::1]:" + port, "tcp [2001:db8::1]:" + port, ""},
		{"connect name lowercased", "CONNECT", "ECHO-name:" + port, "tcp echo-name:" + port, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTestNet()
			tn.redirect = map[string]string{"port80-name:80": srv.Listener.Addr().String()}
			_, proxyAddr := startHTTP(t, tn.config(nil))
			resp, _, _, _ := rawHTTP(t, proxyAddr, tt.method+" "+tt.target+" HTTP/1.1\r\nHost: wrong\r\n\r\n")
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, []string{tt.wantDialed}, tn.Dialed())
			if tt.wantHost != "" {
				assert.Equal(t, tt.wantHost, (<-seen).host, "Host follows the target, not the client's header")
			}
		})
	}
}

// TestHTTPConnectTLS runs HTTPS end to end through a CONNECT tunnel.
func TestHTTPConnectTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "secure "+r.Host)
	}))
	t.Cleanup(srv.Close)
	port := portOf(t, srv.Listener.Addr().String())
	tn := newTestNet()
	_, proxyAddr := startHTTP(t, tn.config(testCreds))
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	client := proxyClient(t, proxyAddr, url.UserPassword("agent", "s3cret"),
		&tls.Config{RootCAs: roots, ServerName: "example.com"}) // httptest's certificate names

	resp, err := client.Get(fmt.Sprintf("https://some-name:%d/", port))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, fmt.Sprintf("secure some-name:%d", port), string(body))
	assert.Equal(t, []string{fmt.Sprintf("tcp some-name:%d", port)}, tn.Dialed())
}

// TestHTTPConnectEarlyData checks bytes sent right behind the CONNECT
// request (read ahead by net/http) reach the destination, and that the
// tunnel half-closes.
func TestHTTPConnectEarlyData(t *testing.T) {
	echoAddr, _ := tcpServer(t, echo)
	_, proxyAddr := startHTTP(t, newTestNet().config(nil))
	target := fmt.Sprintf("echo-name:%d", portOf(t, echoAddr))
	resp, _, c, br := rawHTTP(t, proxyAddr, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\nearly ")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "200 Connection established", resp.Status)
	_, err := io.WriteString(c, "late")
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.Equal(t, "early late", string(rest))
}

func TestHTTPAuth(t *testing.T) {
	srv, _ := backend(t)
	echoAddr, _ := tcpServer(t, echo)
	plain := fmt.Sprintf("http://some-name:%d/", portOf(t, srv.Listener.Addr().String()))
	tunnel := fmt.Sprintf("echo-name:%d", portOf(t, echoAddr))
	tests := []struct {
		name       string
		auth       string // Proxy-Authorization, if any
		wantStatus int
		wantLog    string
		// The refused login reported to LoginFailed, if any.
		wantUser, wantReason string
	}{
		{name: "right", auth: basic("agent", "s3cret"), wantStatus: http.StatusOK},
		{name: "scheme case-insensitive", auth: "basic " + base64.StdEncoding.EncodeToString([]byte("agent:s3cret")), wantStatus: http.StatusOK},
		{name: "missing", wantStatus: http.StatusProxyAuthRequired, wantReason: ReasonNoCredentials},
		{name: "wrong password", auth: basic("agent", "nope"), wantStatus: http.StatusProxyAuthRequired, wantLog: "http proxy authentication refused",
			wantUser: "agent", wantReason: ReasonBadCredentials},
		{name: "wrong user", auth: basic("root", "s3cret"), wantStatus: http.StatusProxyAuthRequired, wantLog: "http proxy authentication refused",
			wantUser: "root", wantReason: ReasonBadCredentials},
		{name: "not basic", auth: "Bearer abc", wantStatus: http.StatusProxyAuthRequired, wantLog: "http proxy authentication refused",
			wantReason: ReasonMalformed},
		{name: "bad base64", auth: "Basic !!!", wantStatus: http.StatusProxyAuthRequired, wantLog: "http proxy authentication refused",
			wantReason: ReasonMalformed},
		{name: "no colon", auth: "Basic " + base64.StdEncoding.EncodeToString([]byte("agents3cret")), wantStatus: http.StatusProxyAuthRequired,
			wantReason: ReasonMalformed},
	}
	for _, tt := range tests {
		for _, method := range []string{http.MethodGet, http.MethodConnect} {
			t.Run(tt.name+"/"+method, func(t *testing.T) {
				var logs logBuf
				n := newTestNet()
				cfg := n.config(testCreds)
				cfg.Logger = logs.logger()
				_, proxyAddr := startHTTP(t, cfg)
				uri := plain
				if method == http.MethodConnect {
					uri = tunnel
				}
				req := method + " " + uri + " HTTP/1.1\r\nHost: x\r\n"
				if tt.auth != "" {
					req += "Proxy-Authorization: " + tt.auth + "\r\n"
				}
				resp, _, _, _ := rawHTTP(t, proxyAddr, req+"\r\n")
				assert.Equal(t, tt.wantStatus, resp.StatusCode)
				if tt.wantStatus == http.StatusProxyAuthRequired {
					assert.Equal(t, `Basic realm="lattice"`, resp.Header.Get("Proxy-Authenticate"))
				}
				if tt.wantLog != "" {
					assert.Contains(t, logs.String(), "level=INFO msg=\""+tt.wantLog)
				}
				assert.NotContains(t, logs.String(), "s3cret")
				var reasons []string
				for _, f := range n.LoginFailures() {
					assert.Equal(t, tt.wantUser, f.Username)
					assert.NotNil(t, f.Client)
					reasons = append(reasons, f.Reason)
				}
				var want []string
				if tt.wantReason != "" {
					want = []string{tt.wantReason}
				}
				assert.Equal(t, want, reasons)
			})
		}
	}
}

// TestHTTPDialFailures checks the status for each way a dial fails, for
// forwarded requests and tunnels.
func TestHTTPDialFailures(t *testing.T) {
	refused := refusedAddr(t)
	tests := []struct {
		name       string
		target     string
		wantStatus int
		wantBody   string
	}{
		{"denied", "denied.test:80", http.StatusForbidden, "test policy refuses denied.test:80: proxy: destination denied by policy"},
		{"no such host", "nohost.test:80", http.StatusBadGateway, "no such host"},
		{"refused", refused, http.StatusBadGateway, "connection refused"},
		{"timeout error", "timeout.test:80", http.StatusGatewayTimeout, "timeout"},
		{"dial timeout", "slow.test:80", http.StatusGatewayTimeout, "deadline exceeded"},
		{"other", "boom.test:80", http.StatusBadGateway, "boom"},
	}
	for _, tt := range tests {
		for _, method := range []string{http.MethodGet, http.MethodConnect} {
			t.Run(tt.name+"/"+method, func(t *testing.T) {
				tn := newTestNet()
				cfg := tn.config(nil)
				cfg.DialTimeout = 200 * time.Millisecond
				_, proxyAddr := startHTTP(t, cfg)
				uri := tt.target
				if method == http.MethodGet {
					uri = "http://" + tt.target + "/"
				}
				start := time.Now()
				resp, body, _, _ := rawHTTP(t, proxyAddr, method+" "+uri+" HTTP/1.1\r\nHost: "+tt.target+"\r\n\r\n")
				assert.Equal(t, tt.wantStatus, resp.StatusCode)
				assert.Contains(t, body, tt.wantBody)
				assert.Less(t, time.Since(start), 2*time.Second)
				attempts := tn.Attempts()
				require.NotEmpty(t, attempts)
				assert.Equal(t, tt.target, attempts[0].Address)
				assert.Error(t, attempts[0].Err)
			})
		}
	}
}

func TestHTTPBadRequests(t *testing.T) {
	tests := []struct {
		name       string
		req        string
		wantStatus int
	}{
		{"origin form", "GET / HTTP/1.1\r\nHost: some-name\r\n\r\n", http.StatusBadRequest},
		{"https absolute form", "GET https://some-name/ HTTP/1.1\r\nHost: some-name\r\n\r\n", http.StatusBadRequest},
		{"options star", "OPTIONS * HTTP/1.1\r\nHost: some-name\r\n\r\n", http.StatusBadRequest},
		{"connect without port", "CONNECT some-name HTTP/1.1\r\nHost: some-name\r\n\r\n", http.StatusBadRequest},
		{"connect port 0", "CONNECT some-name:0 HTTP/1.1\r\nHost: some-name\r\n\r\n", http.StatusBadRequest},
		{"connect path", "CONNECT /some-name:80 HTTP/1.1\r\nHost: some-name\r\n\r\n", http.StatusBadRequest},
		{"numeric name", "GET http://2130706433/ HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusBadRequest},
		{"zone", "GET http://[fe80::1%25lo]/ HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusBadRequest},
		{"underscore ok but bang not", "GET http://a_b!c/ HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusBadRequest},
		{"header too large", "GET http://some-name/ HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTestNet()
			_, proxyAddr := startHTTP(t, tn.config(nil))
			resp, _, _, _ := rawHTTP(t, proxyAddr, tt.req)
			assert.Equal(t, tt.wantStatus, resp.StatusCode)
			assert.Empty(t, tn.Dialed())
		})
	}
}

func TestHTTPHeaderTimeout(t *testing.T) {
	cfg := newTestNet().config(nil)
	cfg.HandshakeTimeout = 200 * time.Millisecond
	_, proxyAddr := startHTTP(t, cfg)
	c := dial(t, proxyAddr)
	_, err := io.WriteString(c, "GET http://some-name/ HTTP/1.1\r\nHost:")
	require.NoError(t, err)
	start := time.Now()
	_, _ = io.ReadAll(c)
	assert.Less(t, time.Since(start), 2*time.Second)
}
