package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/unixhttp"
	"github.com/latticelab/lattice/meshtest"
)

// TestPingUserspace: `lattice ping` against a `lattice up --userspace`
// node, whose overlay no host socket reaches, gets its replies through the
// node's status socket: three pongs from the peer, each with its path and
// round trip, without root. An overlay address nobody holds times out;
// the socket refuses an address outside the overlay and a bad timeout.
func TestPingUserspace(t *testing.T) {
	w := meshtest.Start(t)
	web := w.Peer(t, "web")
	state := t.TempDir()
	out, errOut, stop := start(t, "up", "--name", "pinger", "--control", w.NATSURL, "--token", meshtest.Token, "--state-dir", state,
		"--userspace", "--port", "0", "--listen-addr", "127.0.0.1")
	defer stop()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "up: status on") }, 30*time.Second, 20*time.Millisecond, "%s%s", out, errOut)

	ping := func(args ...string) (string, int) {
		var o, e strings.Builder
		code := execute(t.Context(), append([]string{"ping", "--state-dir", state, "--interval", "100ms"}, args...), &o, &e)
		return o.String() + e.String(), code
	}
	var got string
	require.Eventually(t, func() bool {
		o, code := ping("-c", "1", "web")
		got = o
		return code == 0
	}, 30*time.Second, 200*time.Millisecond, "no reply from web: %s", &got)
	got, code := ping("-c", "3", "web")
	require.Equal(t, 0, code, got)
	pongs := regexp.MustCompile(`pong from web \(`+regexp.QuoteMeta(web.Addr().String())+`\) seq=\d via (direct 127\.0\.0\.1:\d+|relay) in [0-9.]+(µs|ms|s)\n`).FindAllString(got, -1)
	assert.Len(t, pongs, 3, got)
	assert.Contains(t, got, "--- web: 3 sent, 3 replies")

	socket := filepath.Join(state, "lattice.sock")
	p := newSocketPinger(socket)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	nobody := web.Addr().Next().Next().Next()
	_, err := p.Echo(ctx, nobody, 1)
	assert.EqualError(t, err, "no reply (timeout)", "%v holds no peer", nobody)

	post := func(form url.Values) (int, string) {
		resp, err := unixhttp.Client(socket).PostForm("http://lattice/ping", form)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post(url.Values{"dst": {"192.0.2.1"}, "timeout": {"1s"}})
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "not in the overlay")
	code, body = post(url.Values{"dst": {web.Addr().String()}, "timeout": {"1h"}})
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, `timeout "1h"`)
	code, body = post(url.Values{"dst": {"web"}, "timeout": {"1s"}})
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, `dst "web"`)
}
