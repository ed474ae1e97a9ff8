package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/lab/runner"
	"github.com/latticelab/lattice/node"
)

// TestConnectVirtual runs the connect bench's pair in virtual time, where
// its figures are network time alone and exact: the quickstart's tablet
// (10 ms last mile) starts while laptop is up, and laptop pings it. Either
// side may lead the pair's handshakes (the lower key does; the nodes'
// identities are written beforehand to pick it), and both must connect as
// fast. The tablet's start takes 120 ms of 20 ms round trips: four to
// register (TCP, NATS's INFO, CONNECT, the request with its stamped proof
// of key: the lab's control URL carries control's register key), the
// session's connection dialed beside the registration's, then its login
// and its subscriptions with the peer list behind them. Control announces
// the tablet at 70 ms; its relay, dialed with the registration's answer
// at 80, takes it at 130 (TCP, TLS, the hello) and answers at 140. The
// handshake that crosses it then is in place as the bench's ping starts;
// the ping's warm-up echo and one more take 40 ms more when laptop leads
// (190 ms). When tablet leads, its initiation, sent while its relay
// connection is still being dialed, waits in the relay client's queue and
// leaves right behind the hello (pipelined, docs/LRP.md §1), not after
// the answer: 190 ms too, where waiting for WELCOME made it 210 (laptop's
// data waits for tablet's first packet to confirm the session).
func TestConnectVirtual(t *testing.T) {
	topos := Topologies{Pair: quickstart(t), Direct: [2]string{"laptop", "tablet"}}
	for _, tt := range []struct {
		name                  string
		leads                 string
		firstByte, wantDirect time.Duration
	}{
		// The first byte in 190 ms, or 230 when laptop's initiation,
		// kicked when tablet's first signal comes, reaches the relay
		// at the instant tablet joins it and is lost. Direct in 210 or
		// 230 ms (events at one instant).
		{"laptop leads", "laptop", 230 * time.Millisecond, 230 * time.Millisecond},
		{"tablet leads", "tablet", 190 * time.Millisecond, 190 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			state := t.TempDir()
			keys := writeIdentities(t, state, tt.leads, map[string]string{"laptop": "tablet", "tablet": "laptop"}[tt.leads])
			inVirtualTime(t, func(t *testing.T, ctx context.Context) {
				c, err := connectOnce(ctx, topos, state, func(l *runner.Lab) {
					for _, p := range [][2]string{{"laptop", "tablet"}, {"tablet", "laptop"}} {
						st, _ := l.CheckPath(p[0], p[1], "direct") // any path: only the key matters
						assert.Equal(t, keys[p[1]], st.Peer.PublicKey, "%s runs on the identity written for it", p[1])
					}
				})
				require.NoError(t, err)
				t.Logf("%s leads: started %v, first byte %v (%v after the start), direct %v", tt.leads, c.started, c.firstByte, c.firstByte-c.started, c.direct)
				assert.LessOrEqual(t, c.started.Round(time.Millisecond), 120*time.Millisecond, "tablet's start")
				assert.LessOrEqual(t, c.firstByte.Round(time.Millisecond), tt.firstByte, "first byte")
				assert.LessOrEqual(t, c.direct.Round(time.Millisecond), tt.wantDirect, "direct")
			})
		})
	}
}

// writeIdentities gives nodes lower and higher new identities in the
// lab's state dir, lower's key the lower, and returns their public keys.
func writeIdentities(t *testing.T, state, lower, higher string) map[string]key.Public {
	t.Helper()
	k := []key.Private{key.NewPrivate(), key.NewPrivate()}
	if pa, pb := k[0].Public(), k[1].Public(); bytes.Compare(pa[:], pb[:]) > 0 {
		k[0], k[1] = k[1], k[0]
	}
	for i, name := range []string{lower, higher} {
		c := &node.FileCredentials{Path: filepath.Join(state, "nodes", name+".json")}
		require.NoError(t, os.MkdirAll(filepath.Dir(c.Path), 0o700))
		require.NoError(t, c.Save(&node.Identity{Name: name, Private: k[i]}))
	}
	return map[string]key.Public{lower: k[0].Public(), higher: k[1].Public()}
}
