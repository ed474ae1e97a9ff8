package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const curlBin = "/usr/bin/curl"

// runCurl runs curl with args, isolated from the environment (no proxy
// variables, no ~/.curlrc), and returns its stdout and exit code.
func runCurl(t *testing.T, args ...string) (string, int) {
	t.Helper()
	if _, err := exec.LookPath(curlBin); err != nil {
		t.Skipf("real-client test needs %s: %v", curlBin, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	args = append([]string{"-q", "--silent", "--show-error", "--max-time", "5"}, args...)
	cmd := exec.CommandContext(ctx, curlBin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	t.Logf("curl %q: exit %d, stderr %q", args, code, stderr.String())
	return stdout.String(), code
}

func TestCurlSOCKS5(t *testing.T) {
	srv, _ := backend(t)
	url := fmt.Sprintf("http://some-name:%d/", portOf(t, srv.Listener.Addr().String()))
	tn := newTestNet()
	_, proxyAddr := startSOCKS(t, tn.config(testCreds))
	tests := []struct {
		name   string
		args   []string
		wantOK bool
	}{
		{"right credentials", []string{"--socks5-hostname", "agent:s3cret@" + proxyAddr, url}, true},
		{"right credentials, proxy url", []string{"-x", "socks5h://agent:s3cret@" + proxyAddr, url}, true},
		{"no credentials", []string{"--socks5-hostname", proxyAddr, url}, false},
		{"wrong password", []string{"--socks5-hostname", "agent:s3cre@" + proxyAddr, url}, false},
		{"wrong username", []string{"--socks5-hostname", "agnet:s3cret@" + proxyAddr, url}, false},
		{"denied destination", []string{"--socks5-hostname", "agent:s3cret@" + proxyAddr, "http://denied.test/"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, code := runCurl(t, tt.args...)
			if tt.wantOK {
				assert.Equal(t, 0, code)
				assert.Equal(t, "hello /", body)
				return
			}
			assert.NotEqual(t, 0, code)
			assert.Empty(t, body)
		})
	}
	// curl --socks5-hostname leaves the name to the proxy.
	assert.Contains(t, tn.Dialed(), "tcp some-name:"+itoa(portOf(t, srv.Listener.Addr().String())))
}

func TestCurlHTTPProxy(t *testing.T) {
	srv, _ := backend(t)
	url := fmt.Sprintf("http://some-name:%d/", portOf(t, srv.Listener.Addr().String()))
	tn := newTestNet()
	_, proxyAddr := startHTTP(t, tn.config(testCreds))
	right, wrong := "http://agent:s3cret@"+proxyAddr, "http://agent:nope@"+proxyAddr
	tests := []struct {
		name     string
		args     []string
		wantCode int // 22: --fail saw a 4xx; 56: CONNECT refused
	}{
		{"plain, right credentials", []string{"-x", right, url}, 0},
		{"plain, wrong credentials", []string{"--fail", "-x", wrong, url}, 22},
		{"plain, no credentials", []string{"--fail", "-x", "http://" + proxyAddr, url}, 22},
		{"plain, denied", []string{"--fail", "-x", right, "http://denied.test/"}, 22},
		{"connect, right credentials", []string{"--proxytunnel", "-x", right, url}, 0},
		{"connect, wrong credentials", []string{"--proxytunnel", "-x", wrong, url}, 56},
		{"connect, denied", []string{"--proxytunnel", "-x", right, "http://denied.test/"}, 56},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, code := runCurl(t, tt.args...)
			assert.Equal(t, tt.wantCode, code)
			if tt.wantCode == 0 {
				assert.Equal(t, "hello /", body)
			} else {
				assert.Empty(t, body)
			}
		})
	}
}
