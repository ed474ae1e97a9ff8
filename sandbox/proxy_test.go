package sandbox_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/proxy"
)

// TestProxyRefusals: through the pod's SOCKS5 proxy a peer's closed port
// is "connection refused" (RFC 1928 reply 5), and every refused login on
// either proxy is in the audit log with the client's address and the
// reason, never the password.
func TestProxyRefusals(t *testing.T) {
	m := newMesh(t)
	state := t.TempDir()
	d := startPod(t, m.config(t, "agent", state))
	st := d.Status()

	// web serves 8080 only; its stack answers 8081 with a RST. The first
	// connection waits for WireGuard's handshake, well within 20s.
	c := dialProxy(t, st.SOCKS5)
	socksLogin(t, c, creds.Username, creds.Password, 0)
	dst := netip.AddrPortFrom(m.web.Addr(), 8081)
	req := append([]byte{5, 1, 0, 1}, dst.Addr().AsSlice()...)
	_, err := c.Write(append(req, byte(dst.Port()>>8), byte(dst.Port())))
	require.NoError(t, err)
	reply := make([]byte, 10)
	_, err = io.ReadFull(c, reply)
	require.NoError(t, err)
	assert.Equal(t, byte(5), reply[1], "reply to a CONNECT to %v, a closed port", dst)

	const wrong = "not-the-password-4711"
	socksClient := dialProxy(t, st.SOCKS5)
	socksLogin(t, socksClient, creds.Username, wrong, 1)
	httpClient := dialProxy(t, st.HTTPProxy)
	_, err = io.WriteString(httpClient, "GET http://web:8080/ HTTP/1.1\r\nHost: web:8080\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(httpClient), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusProxyAuthRequired, resp.StatusCode)

	require.NoError(t, d.Close())
	b, err := os.ReadFile(filepath.Join(state, "audit.jsonl"))
	require.NoError(t, err)
	assert.NotContains(t, string(b), wrong, "no password in the audit log")
	var logins []audit.Event
	for line := range strings.Lines(string(b)) {
		var ev audit.Event
		require.NoError(t, json.Unmarshal([]byte(line), &ev), "audit line %q", line)
		if ev.Kind == "login" {
			ev.Time = time.Time{}
			logins = append(logins, ev)
		}
	}
	// Two connections' refusals: their records may land in either order.
	assert.ElementsMatch(t, []audit.Event{
		{Kind: "login", Decision: "deny", Proto: "tcp", Src: socksClient.LocalAddr().String(),
			Detail: "socks5: " + proxy.ReasonBadCredentials + ` (user "agent")`},
		{Kind: "login", Decision: "deny", Proto: "tcp", Src: httpClient.LocalAddr().String(),
			Detail: "http: " + proxy.ReasonNoCredentials},
	}, logins)
}

func dialProxy(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
	return c
}

// socksLogin offers username/password (RFC 1929) and checks the status.
func socksLogin(t *testing.T, c net.Conn, user, pass string, wantStatus byte) {
	t.Helper()
	msg := append([]byte{5, 1, 2, 1, byte(len(user))}, user...)
	msg = append(append(msg, byte(len(pass))), pass...)
	_, err := c.Write(msg)
	require.NoError(t, err)
	got := make([]byte, 4)
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, []byte{5, 2, 1, wantStatus}, got)
}
