package relay

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func newKey(t testing.TB) key.Public {
	t.Helper()
	var k key.Public
	_, err := rand.Read(k[:])
	require.NoError(t, err)
	return k
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func startServer(t testing.TB, cfg ServerConfig) *Server {
	t.Helper()
	if cfg.Secret == nil {
		cfg.Secret = testSecret
	}
	s, err := NewServer(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// clientFor returns a client of s with a fresh key and a valid token,
// configured by tweak, not yet waited for.
func clientFor(t testing.TB, s *Server, tweak func(*ClientConfig)) *Client {
	t.Helper()
	key := newKey(t)
	cfg := ClientConfig{
		Server:      s.Addr().String(),
		Fingerprint: s.Fingerprint(),
		Key:         key,
		Token:       IssueToken(testSecret, key, time.Now().Add(time.Hour)),
		MinBackoff:  20 * time.Millisecond,
		MaxBackoff:  200 * time.Millisecond,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

func connectedClient(t testing.TB, s *Server, tweak func(*ClientConfig)) *Client {
	t.Helper()
	c := clientFor(t, s, tweak)
	require.NoError(t, c.WaitConnected(ctxT(t, 10*time.Second)))
	return c
}

// eventually polls cond until it holds or d passes.
func eventually(t testing.TB, d time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: "+msg, append([]any{d}, args...)...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rawConn is a hand-driven LRP connection for tests that misbehave on
// purpose: it authenticates like a client and then lets the test write
// and read frames itself.
type rawConn struct {
	t  testing.TB
	cc *cconn
}

// rawTLS is the TLS configuration a client of s presents, for tests that
// speak to s below the Client (their own TLS or QUIC dial).
func rawTLS(t testing.TB, s *Server) *tls.Config {
	t.Helper()
	cfg := ClientConfig{Server: s.Addr().String(), Fingerprint: s.Fingerprint(), Key: newKey(t), Token: "x"}
	require.NoError(t, cfg.setDefaults())
	tc, err := clientTLS(&cfg, "127.0.0.1")
	require.NoError(t, err)
	return tc
}

// dialRaw authenticates key with tok over transport and returns the
// connection, or the error the server answered with.
func dialRaw(t testing.TB, s *Server, transport string, key key.Public, tok Token) (*rawConn, error) {
	t.Helper()
	cfg := ClientConfig{Server: s.Addr().String(), Fingerprint: s.Fingerprint(), Key: key, Token: tok, DialTimeout: 5 * time.Second}
	require.NoError(t, cfg.setDefaults())
	tc, err := clientTLS(&cfg, "127.0.0.1")
	require.NoError(t, err)
	d := &Client{cfg: cfg, tls: tc, token: tok}
	cc, err := d.dialOne(ctxT(t, 10*time.Second), transport, tok, newPktQueue(cfg.QueueLen))
	if err != nil {
		return nil, err
	}
	r := &rawConn{t: t, cc: cc}
	t.Cleanup(r.close)
	return r, nil
}

func mustDialRaw(t testing.TB, s *Server, transport string) *rawConn {
	t.Helper()
	key := newKey(t)
	r, err := dialRaw(t, s, transport, key, IssueToken(testSecret, key, time.Now().Add(time.Hour)))
	require.NoError(t, err)
	return r
}

func (r *rawConn) close() { r.cc.w.closeConn() }

func (r *rawConn) writeRaw(b []byte) {
	r.t.Helper()
	_, err := r.cc.w.bw.Write(b)
	require.NoError(r.t, err)
	require.NoError(r.t, r.cc.w.bw.Flush())
}

func (r *rawConn) write(f frame) {
	r.t.Helper()
	b, err := appendFrame(nil, &f)
	require.NoError(r.t, err)
	r.writeRaw(b)
}

// readUntil reads frames until one of type typ arrives (skipping PINGs
// and the like) and returns it, or the read error.
func (r *rawConn) readUntil(typ frameType) (frame, error) {
	r.t.Helper()
	setDeadline(r.cc.w, time.Now().Add(5*time.Second))
	for {
		f, err := readFrame(r.cc.w.br)
		if err != nil || f.typ == typ {
			return f, err
		}
	}
}

func setDeadline(w *wire, t time.Time) {
	if w.qs != nil {
		_ = w.qs.SetReadDeadline(t)
		return
	}
	_ = w.nc.SetReadDeadline(t)
}

func tlsWith(cert tls.Certificate) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}}
}

// logCapture keeps every record logged through its logger, for tests that
// check what the relay tells its operator.
type logCapture struct {
	mu      sync.Mutex
	records []loggedRecord
}

// loggedRecord is one record, its attributes (the logger's own included)
// as the text handlers print their values.
type loggedRecord struct {
	msg   string
	attrs map[string]string
}

func (c *logCapture) logger() *slog.Logger { return slog.New(&captureHandler{c: c}) }

// find returns the records with message msg whose attributes include want.
func (c *logCapture) find(msg string, want map[string]string) []loggedRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []loggedRecord
next:
	for _, r := range c.records {
		if r.msg != msg {
			continue
		}
		for k, v := range want {
			if r.attrs[k] != v {
				continue next
			}
		}
		out = append(out, r)
	}
	return out
}

type captureHandler struct {
	c     *logCapture
	attrs []slog.Attr
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	rec := loggedRecord{msg: r.Message, attrs: map[string]string{}}
	add := func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Resolve().String()
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.c.mu.Lock()
	h.c.records = append(h.c.records, rec)
	h.c.mu.Unlock()
	return nil
}

func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureHandler{c: h.c, attrs: append(slices.Clip(h.attrs), as...)}
}

// WithGroup is not needed: the relay logs no groups.
func (h *captureHandler) WithGroup(string) slog.Handler { return h }
