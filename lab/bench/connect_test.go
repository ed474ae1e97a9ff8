package bench

import (
	"bytes"
	"context"
	"testing"
	"testing/cryptotest"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats-server/v2/server/ats"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/labfile"
	"github.com/latticelab/lattice/lab/runner"
	"github.com/latticelab/lattice/lab/vtime"
)

// TestConnectVirtual runs the connect bench's pair in virtual time, where
// its figures are network time alone and exact: the quickstart's tablet
// (10 ms last mile) starts while laptop is up, and laptop pings it. Either
// side may lead the pair's handshakes (the lower key does; crypto/rand is
// seeded for each), and both must connect as fast: the tablet's own start
// (registration, relay, control session and peer list) takes 200 ms, its
// first echo comes back 50 ms later (a WireGuard handshake and an echo
// over the relay, 20 ms round trips), and the bench's ping is answered
// once more 20 ms after that. When laptop led, its first initiation went
// out before tablet had joined the relay and waited for its 300 ms
// resend: 450 ms.
func TestConnectVirtual(t *testing.T) {
	if ok, why := vtime.Available(); !ok {
		t.Skip(why)
	}
	var l labfile.Loader
	release := l.Hold()
	defer func() { require.NoError(t, release()) }()
	f, err := l.Load("builtin:quickstart", labfile.Options{Kind: labfile.Topology})
	require.NoError(t, err)
	topos := Topologies{Pair: f.Plan, Direct: [2]string{"laptop", "tablet"}}
	for _, tt := range []struct {
		name  string
		seed  uint64
		leads string
	}{
		{"laptop leads", 1, "laptop"},
		{"tablet leads", 2, "tablet"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cryptotest.SetGlobalRandom(t, tt.seed)
			ats.Register()
			defer ats.Unregister()
			dog := vtime.Watch(vtime.WatchdogConfig{Name: t.Name()})
			synctest.Test(t, func(t *testing.T) {
				defer dog.Pulse()()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var leads string
				fb, direct, err := connectOnce(ctx, topos, func(l *runner.Lab) {
					leads = leader(t, l, "laptop", "tablet")
				})
				require.NoError(t, err)
				t.Logf("%s leads: first byte %v, direct %v", leads, fb, direct)
				require.Equal(t, tt.leads, leads, "the seed no longer gives this case")
				assert.LessOrEqual(t, fb.Round(time.Millisecond), 270*time.Millisecond, "first byte")
				assert.LessOrEqual(t, direct.Round(time.Millisecond), 340*time.Millisecond, "direct")
			})
			require.NoError(t, dog.Stop())
		})
	}
}

// leader is the one of a and b that leads their handshakes: the lower key.
func leader(t *testing.T, l *runner.Lab, a, b string) string {
	t.Helper()
	ab, err := l.CheckPath(a, b, "direct")
	require.NoError(t, err)
	ba, err := l.CheckPath(b, a, "direct")
	require.NoError(t, err)
	if bytes.Compare(ba.Peer.PublicKey[:], ab.Peer.PublicKey[:]) < 0 {
		return a
	}
	return b
}
