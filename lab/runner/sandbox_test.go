package runner

import (
	"io"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSOCKS5LongFields: a user name, password or host name longer than
// the protocol's one-byte length is refused with an error naming it, not
// sent with its length cut to the low byte.
func TestSOCKS5LongFields(t *testing.T) {
	long := strings.Repeat("a", 256)
	for _, tc := range []struct {
		name, addr, user, pass, want string
	}{
		{"user", "example.com:80", long, "pw", "socks5: user name of 256 bytes: at most 255"},
		{"password", "example.com:80", "agent", long, "socks5: password of 256 bytes: at most 255"},
		{"host", net.JoinHostPort(long, "80"), "", "", "socks5: host name of 256 bytes: at most 255"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, proxy := net.Pipe()
			done := make(chan struct{})
			go func() {
				// A proxy that accepts the greeting, then reads one
				// message and hangs up.
				defer close(done)
				defer proxy.Close()
				var greet [3]byte
				if _, err := io.ReadFull(proxy, greet[:]); err != nil {
					return
				}
				if _, err := proxy.Write([]byte{5, greet[2]}); err != nil {
					return
				}
				_, _ = proxy.Read(make([]byte, 1024))
			}()
			err := socks5Connect(c, tc.addr, tc.user, tc.pass)
			c.Close()
			<-done
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
