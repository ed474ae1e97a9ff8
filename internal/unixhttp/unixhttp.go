// Package unixhttp serves and calls HTTP on a unix socket that only its
// owner may use: how a running lattice up or lattice sandbox answers the
// commands that inspect it.
package unixhttp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// Serve serves h on a unix socket at path (mode 0600, replacing a stale
// socket) until the returned stop is called; stop removes the socket.
func Serve(path string, h http.Handler) (stop func(), err error) {
	_ = os.Remove(path) // a stale socket from a crash
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		<-done
		_ = os.Remove(path)
	}, nil
}

// Client returns an HTTP client whose every request goes to the socket at
// path, whatever the URL's host.
func Client(path string) *http.Client {
	return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
}
