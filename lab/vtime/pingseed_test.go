package vtime

import (
	"bufio"
	"strings"
	"testing"
	"testing/cryptotest"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// firstPing starts an embedded nats-server in a bubble, connects a raw
// client and returns how long after CONNECT the server's first PING came.
func firstPing(t *testing.T) time.Duration {
	t.Helper()
	var took time.Duration
	synctest.Test(t, func(t *testing.T) {
		srv, err := server.NewServer(&server.Options{DontListen: true, NoLog: true, NoSigs: true})
		require.NoError(t, err)
		srv.Start()
		defer srv.Shutdown()
		require.True(t, srv.ReadyForConnections(time.Second))
		c, err := srv.InProcessConn()
		require.NoError(t, err)
		defer c.Close()
		r := bufio.NewReader(c)
		info, err := r.ReadString('\n') // net.Pipe: INFO first, or both wait
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(info, "INFO "), info)
		start := time.Now()
		_, err = c.Write([]byte("CONNECT {\"verbose\":false}\r\n"))
		require.NoError(t, err)
		for {
			line, err := r.ReadString('\n')
			require.NoError(t, err)
			if strings.TrimSpace(line) == "PING" {
				took = time.Since(start)
				return
			}
		}
	})
	return took
}

// TestNATSServerFirstPingSeeded: nats-server delays its first PING to a
// client by a random part of 20% of 2 s. Unpatched, that part comes from
// math/rand/v2's runtime-seeded generator and differs from run to run
// (two runs agree with odds of one in 4e8); the overlay draws it from
// crypto/rand, so two bubbles with crypto/rand seeded the same see the
// PING at the same instant.
func TestNATSServerFirstPingSeeded(t *testing.T) {
	needNATSLock(t) // the same overlay
	cryptotest.SetGlobalRandom(t, 24)
	a := firstPing(t)
	cryptotest.SetGlobalRandom(t, 24)
	b := firstPing(t)
	t.Logf("first PING after %v and %v", a, b)
	assert.GreaterOrEqual(t, a, 2*time.Second)
	assert.Less(t, a, 2*time.Second+400*time.Millisecond)
	assert.Equal(t, a, b, "the first PING's jitter does not follow the seeded crypto/rand")
}
