package metrics

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		remote     bool
		wantErr    string
	}{
		{name: "loopback v4", addr: "127.0.0.1:9090"},
		{name: "loopback other", addr: "127.0.0.2:0"},
		{name: "loopback v6", addr: "[::1]:9090"},
		{name: "localhost", addr: "localhost:9090"},
		{name: "every address", addr: ":9090", wantErr: `metrics: refusing to listen beyond loopback: :9090 (every address); use 127.0.0.1:PORT, or allow it explicitly`},
		{name: "unspecified", addr: "0.0.0.0:9090", wantErr: `metrics: refusing to listen beyond loopback: 0.0.0.0:9090 (0.0.0.0)`},
		{name: "public", addr: "203.0.113.5:9090", wantErr: `(203.0.113.5)`},
		{name: "hostname", addr: "example.net:9090", wantErr: `(example.net)`},
		{name: "allowed", addr: "0.0.0.0:9090", remote: true},
		{name: "allowed empty", addr: ":9090", remote: true},
		{name: "no port", addr: "127.0.0.1", wantErr: `metrics: listen address "127.0.0.1": address 127.0.0.1: missing port in address`},
		{name: "no port even if remote", addr: "nohost", remote: true, wantErr: `missing port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckListen(tc.addr, tc.remote)
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.wantErr)
		})
	}
	assert.ErrorIs(t, CheckListen(":1", false), ErrRemoteListen)
}

// TestServe: the registry's runtime metrics and a daemon's own come out of
// /metrics; other paths and methods are refused; Close stops the server.
func TestServe(t *testing.T) {
	reg := NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "lattice_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := Serve(ln, reg, nil)
	resp, err := http.Get(s.URL())
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, want := range []string{"lattice_test_total 3", "go_goroutines ", "go_memstats_heap_alloc_bytes ", "process_open_fds "} {
		assert.Contains(t, string(body), want)
	}
	resp, err = http.Post(s.URL(), "text/plain", strings.NewReader("x"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	resp, err = http.Get("http://" + s.Addr().String() + "/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = http.Get(s.URL())
	assert.Error(t, err, "still serving after Close")
}
