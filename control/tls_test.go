package control

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/netx"
)

// recorder is a TCP proxy on loopback that keeps every byte it forwards,
// both ways: what a capture of the connection would show.
type recorder struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu    sync.Mutex // guards the following fields
	buf   bytes.Buffer
	conns []net.Conn
}

func startRecorder(t *testing.T, target string) *recorder {
	t.Helper()
	ln, err := netx.OS.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &recorder{ln: ln, target: target}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *recorder) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := netx.OS.Dial(context.Background(), "tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, c, up)
		r.mu.Unlock()
		r.wg.Add(2)
		go r.copy(up, c)
		go r.copy(c, up)
	}
}

func (r *recorder) copy(dst, src net.Conn) {
	defer r.wg.Done()
	b := make([]byte, 32<<10)
	for {
		n, err := src.Read(b)
		if n > 0 {
			r.mu.Lock()
			r.buf.Write(b[:n])
			r.mu.Unlock()
			if _, werr := dst.Write(b[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

func (r *recorder) close() {
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *recorder) captured() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes())
}

// selfSigned is a server TLS configuration and its fingerprint.
func selfSigned(t *testing.T) (*tls.Config, string) {
	t.Helper()
	tc, fp, err := SelfSignedTLS(filepath.Join(t.TempDir(), "tls"), time.Now())
	require.NoError(t, err)
	return tc, fp
}

// registerRaw sends the first registration request, the one carrying the
// join token, over HTTP and over NATS (where the token is also the join
// user's password), through the clients' own dialing code, and returns
// the bodies control answered.
func registerRaw(t *testing.T, httpURL, natsURL string) (httpReply, natsReply []byte) {
	t.Helper()
	body, err := json.Marshal(controlapi.RegisterRequest{Token: testToken, Name: "capture", PublicKey: newKey(t)})
	require.NoError(t, err)

	client, base, err := controlapi.HTTPClient(netx.OS, httpURL)
	require.NoError(t, err)
	defer client.CloseIdleConnections()
	resp, err := client.Post(base+"/v1/register", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	httpReply, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)

	user := joinPrefix + "0123456789abcdef0123456789abcdef"
	nc, err := controlapi.DialNATS(netx.OS, natsURL, nats.UserInfo(user, testToken),
		nats.CustomInboxPrefix(controlapi.InboxPrefix+"."+user), nats.NoReconnect())
	require.NoError(t, err)
	defer nc.Close()
	m, err := nc.Request(controlapi.SubjectRegister, body, 10*time.Second)
	require.NoError(t, err)
	return httpReply, m.Data
}

// TestTLSCaptureHasNoToken: registration through a recording proxy shows
// the join token in clear without TLS, and nowhere with it (over HTTP and
// NATS alike), while control answers both.
func TestTLSCaptureHasNoToken(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tls       bool
		wantToken bool
	}{
		{"plaintext", false, true},
		{"tls", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg *tls.Config
			fp := ""
			if tc.tls {
				cfg, fp = selfSigned(t)
			}
			env := startServer(t, "", func(c *Config) { c.TLS = cfg })
			httpRec := startRecorder(t, env.srv.HTTPAddr().String())
			natsRec := startRecorder(t, env.srv.NATS().Addr().String())
			httpURL, natsURL := "http://"+httpRec.ln.Addr().String(), "nats://"+natsRec.ln.Addr().String()
			if tc.tls {
				assert.Equal(t, "https://"+env.srv.HTTPAddr().String(), env.srv.HTTPURL())
				assert.Equal(t, "tls://"+env.srv.NATS().Addr().String(), env.srv.NATS().URL())
				assert.Equal(t, fp, env.srv.Fingerprint())
				httpURL = "https://" + httpRec.ln.Addr().String() + "?fingerprint=" + fp
				natsURL = "tls://" + natsRec.ln.Addr().String() + "?fingerprint=" + fp
			}

			hr, nr := registerRaw(t, httpURL, natsURL)
			assert.True(t, json.Valid(hr), "HTTP reply %q", hr)
			assert.True(t, json.Valid(nr), "NATS reply %q", nr)
			for name, rec := range map[string]*recorder{"HTTP": httpRec, "NATS": natsRec} {
				got := rec.captured()
				require.NotEmpty(t, got, "%s: nothing went through the proxy", name)
				assert.Equal(t, tc.wantToken, bytes.Contains(got, []byte(testToken)), "%s capture holds the join token", name)
				assert.Equal(t, !tc.tls, bytes.Contains(got, []byte(`"name":"capture"`)), "%s capture holds the request", name)
			}
		})
	}
}

// TestTLSRegisterAndSession: the public client API over TLS: a node
// registers over pinned NATS and pinned HTTPS, its NATS URL inherits the
// pin (the same host), and its session connects and answers with it.
func TestTLSRegisterAndSession(t *testing.T) {
	cfg, fp := selfSigned(t)
	env := startServer(t, "", func(c *Config) { c.TLS = cfg })
	natsURL := env.srv.NATS().URL()
	ctx := ctxT(t)

	a, err := controlapi.RegisterNATS(ctx, netx.OS, natsURL+"?fingerprint="+fp, controlapi.Join{Token: testToken, Name: "alpha", Key: newPriv(t)})
	require.NoError(t, err)
	assert.Equal(t, natsURL+"?fingerprint="+fp, a.NATS.URL)
	b, err := controlapi.RegisterHTTP(ctx, netx.OS, env.srv.HTTPURL()+"?fingerprint="+fp, controlapi.Join{Token: testToken, Name: "beta", Key: newPriv(t)})
	require.NoError(t, err)
	assert.Equal(t, natsURL+"?fingerprint="+fp, b.NATS.URL)

	s, err := controlapi.Connect(ctx, netx.OS, a.NodeID, a.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer s.Close()
	peers, err := s.Peers(ctx)
	require.NoError(t, err)
	require.Len(t, peers, 1)
	assert.Equal(t, "beta", peers[0].Name)

	// Without the pin the advertised URL alone does not verify.
	creds := a.NATS
	creds.URL = natsURL
	_, err = controlapi.Connect(ctx, netx.OS, a.NodeID, creds, controlapi.Handlers{})
	require.ErrorContains(t, err, "certificate")
}

// TestTLSWrongFingerprintRefused: a pin that is not control's certificate,
// or no pin for a self-signed one, is refused on both transports, and the
// error names the certificate seen.
func TestTLSWrongFingerprintRefused(t *testing.T) {
	cfg, fp := selfSigned(t)
	env := startServer(t, "", func(c *Config) { c.TLS = cfg })
	wrong := strings.Repeat("ab", 32)
	httpHost, natsHost := env.srv.HTTPAddr().String(), env.srv.NATS().Addr().String()
	for _, tc := range []struct {
		name, url, want string
	}{
		{"nats wrong pin", "tls://" + natsHost + "?fingerprint=" + wrong, "server certificate " + fp + " does not match the pinned fingerprint " + wrong},
		{"http wrong pin", "https://" + httpHost + "?fingerprint=" + wrong, "server certificate " + fp + " does not match the pinned fingerprint " + wrong},
		{"nats no pin", "tls://" + natsHost, "certificate"},
		{"http no pin", "https://" + httpHost, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if strings.HasPrefix(tc.url, "https") {
				var client *http.Client
				var base string
				client, base, err = controlapi.HTTPClient(netx.OS, tc.url)
				require.NoError(t, err)
				var resp *http.Response
				resp, err = client.Post(base+"/v1/register", "application/json", strings.NewReader(`{}`))
				if err == nil {
					resp.Body.Close()
				}
				client.CloseIdleConnections()
			} else {
				var nc *nats.Conn
				nc, err = controlapi.DialNATS(netx.OS, tc.url, nats.UserInfo(joinPrefix+"0123456789abcdef", testToken), nats.NoReconnect())
				if err == nil {
					nc.Close()
				}
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	assert.Zero(t, env.srv.Stats().Registered+env.srv.Stats().Refused, "no request reached control")
}

// TestTLSNATSNoPlaintextProtocol: on a TLS listener control sends nothing
// in clear (no INFO), and a plaintext NATS client gets no session.
func TestTLSNATSNoPlaintextProtocol(t *testing.T) {
	cfg, _ := selfSigned(t)
	env := startServer(t, "", func(c *Config) { c.TLS = cfg })
	addr := env.srv.NATS().Addr().String()

	c, err := netx.OS.Dial(t.Context(), "tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	n, err := c.Read(make([]byte, 64))
	assert.Zero(t, n, "control spoke before the TLS handshake")
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())

	nc, err := controlapi.DialNATS(netx.OS, "nats://"+addr, nats.UserInfo(joinPrefix+"0123456789abcdef", testToken),
		nats.NoReconnect(), nats.Timeout(2*time.Second))
	if err == nil {
		nc.Close()
	}
	require.Error(t, err, "a plaintext client got a session on the TLS listener")
}

// failNetwork fails the test on any dial: what must be refused before a
// connection is attempted.
type failNetwork struct {
	netx.Network
	mu    sync.Mutex
	dials []string
}

func (f *failNetwork) Dial(_ context.Context, _, address string) (net.Conn, error) {
	f.mu.Lock()
	f.dials = append(f.dials, address)
	f.mu.Unlock()
	return nil, errors.New("failNetwork: no dialing here")
}

// TestPlaintextRefusedBeforeDial: every client entry point refuses a
// plaintext URL to a non-loopback host without dialing it.
func TestPlaintextRefusedBeforeDial(t *testing.T) {
	fn := &failNetwork{Network: netx.OS}
	_, err := controlapi.DialNATS(fn, "nats://192.0.2.10:4222")
	require.ErrorIs(t, err, controlapi.ErrPlaintext)
	assert.Contains(t, err.Error(), "use tls://192.0.2.10:4222")
	assert.Contains(t, err.Error(), "--insecure")
	_, _, err = controlapi.HTTPClient(fn, "http://192.0.2.10:8080")
	require.ErrorIs(t, err, controlapi.ErrPlaintext)
	assert.Contains(t, err.Error(), "use https://192.0.2.10:8080")
	_, err = controlapi.Connect(t.Context(), fn, "n1", controlapi.NATSCreds{URL: "nats://192.0.2.10:4222", User: "n1", Password: "secret-password"}, controlapi.Handlers{})
	require.ErrorIs(t, err, controlapi.ErrPlaintext)
	assert.NotContains(t, err.Error(), "secret-password")

	// Control's own connection to an external NATS carries its password.
	st, err := OpenFileStore(filepath.Join(t.TempDir(), "registry.json"))
	require.NoError(t, err)
	_, err = New(t.Context(), Config{Store: st, Tokens: []JoinToken{{Value: testToken}}, Network: fn,
		NATSURL: "nats://192.0.2.10:4222", NATSUser: "control", NATSPassword: "secret-password"})
	require.ErrorIs(t, err, controlapi.ErrPlaintext)
	assert.Contains(t, err.Error(), "NATS URL")
	assert.NotContains(t, err.Error(), "secret-password")
	assert.Empty(t, fn.dials)
}

// TestSelfSignedTLSKept: the certificate (and so the pin) survives a
// restart, the key is private, a readable key is refused.
func TestSelfSignedTLSKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	now := time.Now()
	_, fp1, err := SelfSignedTLS(dir, now)
	require.NoError(t, err)
	_, fp2, err := SelfSignedTLS(dir, now.Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, fp1, fp2, "the pin changed across a restart")
	b, err := os.ReadFile(filepath.Join(dir, SelfSignedFingerprintFile))
	require.NoError(t, err)
	assert.Equal(t, fp1+"\n", string(b))
	fi, err := os.Stat(filepath.Join(dir, SelfSignedKeyFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	_, fp3, err := SelfSignedTLS(dir, now.Add(2*365*24*time.Hour))
	require.NoError(t, err)
	assert.NotEqual(t, fp1, fp3, "an expired certificate is replaced")

	require.NoError(t, os.Chmod(filepath.Join(dir, SelfSignedKeyFile), 0o644))
	_, _, err = SelfSignedTLS(dir, now)
	require.ErrorContains(t, err, "chmod 600")
	_, err = LoadTLS(filepath.Join(dir, SelfSignedCertFile), filepath.Join(dir, SelfSignedKeyFile))
	require.ErrorContains(t, err, "chmod 600")
	require.NoError(t, os.Chmod(filepath.Join(dir, SelfSignedKeyFile), 0o600))
	tc, err := LoadTLS(filepath.Join(dir, SelfSignedCertFile), filepath.Join(dir, SelfSignedKeyFile))
	require.NoError(t, err)
	require.Len(t, tc.Certificates, 1)

	_, err = serverTLS(&tls.Config{})
	require.ErrorContains(t, err, "no certificate")
}

// BenchmarkJoinTLS measures whole joins as a node makes them: a new NATS
// connection (with TLS: the handshake and the pin check), the two
// registration requests, then closing; NewMemStore keeps the registry out of
// the measurement.
func BenchmarkJoinTLS(b *testing.B) {
	for _, mode := range []string{"plaintext", "tls"} {
		b.Run(mode, func(b *testing.B) {
			cfg := Config{Tokens: []JoinToken{{Value: testToken}}, Store: NewMemStore(), EmbeddedNATS: &EmbeddedNATSConfig{Listen: "127.0.0.1:0"}}
			fp := ""
			if mode == "tls" {
				tc, f, err := SelfSignedTLS(filepath.Join(b.TempDir(), "tls"), time.Now())
				if err != nil {
					b.Fatal(err)
				}
				cfg.TLS, fp = tc, "?fingerprint="+f
			}
			srv, err := New(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			url := srv.NATS().URL() + fp
			joins := make([]controlapi.Join, b.N)
			for i := range joins {
				k := newPriv(b)
				joins[i] = controlapi.Join{Token: testToken, Name: "n" + nodeID(k.Public())[1:9], Key: k}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			b.ResetTimer()
			for i := range b.N {
				if _, err := controlapi.RegisterNATS(ctx, netx.OS, url, joins[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "join/s")
		})
	}
}
