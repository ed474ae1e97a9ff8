package main

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/node"
)

// fakeEcho answers every echo after rtt, or fails the seqs in lost.
type fakeEcho struct {
	rtt  time.Duration
	lost map[int]bool
}

func (f fakeEcho) Echo(_ context.Context, _ netip.Addr, seq int) (time.Duration, error) {
	if f.lost[seq] {
		return 0, errors.New("no reply (timeout)")
	}
	return f.rtt, nil
}

// pathsAfter is a status source whose peer is relayed for the first n
// looks and direct after.
func pathsAfter(n int) func(context.Context) (node.PeerStatus, error) {
	looks := 0
	return func(context.Context) (node.PeerStatus, error) {
		looks++
		st := node.PeerStatus{Peer: controlapi.Peer{Name: "web-1", Address: netip.MustParsePrefix("100.64.0.2/10")}, Path: node.PathRelay, Endpoint: "relay",
			Why: "attempt timed out after 10s"}
		if looks > n {
			st.Path, st.Endpoint = node.PathDirect, "192.0.2.7:51820"
			st.History = []node.PathEvent{{To: node.PathDirect, Reason: "ICE nominated a pair"}}
		}
		return st, nil
	}
}

func TestPingLoop(t *testing.T) {
	fast := pingConfig{count: 5, interval: time.Millisecond, timeout: time.Second}
	for _, tc := range []struct {
		name      string
		cfg       pingConfig
		directAt  int
		lost      map[int]bool
		wantErr   string
		want      []string
		wantLines int
	}{
		{name: "relay then direct", cfg: fast, directAt: 3, want: []string{
			"PING web-1 (100.64.0.2) over relay",
			"pong from web-1 (100.64.0.2) seq=1 via relay in 1.5ms",
			"path upgraded: relay -> direct (ICE nominated a pair)",
			"pong from web-1 (100.64.0.2) seq=3 via direct 192.0.2.7:51820 in 1.5ms",
			"--- web-1: 5 sent, 5 replies, 3 direct",
		}},
		{name: "until direct stops there", cfg: pingConfig{count: 5, untilDirect: true, interval: time.Millisecond, timeout: time.Second}, directAt: 2,
			want: []string{"seq=2 via direct"}, wantLines: 4},
		{name: "until direct fails", cfg: pingConfig{count: 3, untilDirect: true, interval: time.Millisecond, timeout: time.Second}, directAt: 99,
			wantErr: "no direct path to web-1 after 3 pings (attempt timed out after 10s)"},
		{name: "lost replies", cfg: fast, directAt: 99, lost: map[int]bool{1: true, 2: true, 3: true, 4: true, 5: true},
			want: []string{"seq=2: no reply (timeout) (path relay)"}, wantErr: "no reply from web-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			look := pathsAfter(tc.directAt)
			first, _ := look(context.Background())
			var out bytes.Buffer
			err := pingLoop(context.Background(), &out, first, look, fakeEcho{rtt: 1500 * time.Microsecond, lost: tc.lost}, tc.cfg)
			if tc.wantErr != "" {
				assert.EqualError(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			for _, w := range tc.want {
				assert.Contains(t, out.String(), w)
			}
			if tc.wantLines > 0 {
				assert.Equal(t, tc.wantLines, strings.Count(out.String(), "\n"), out.String())
			}
		})
	}
}

// TestPingAndNetcheckFlagErrors: a bad count, interval or timeout is a
// usage error naming that flag, before any socket is opened.
func TestPingAndNetcheckFlagErrors(t *testing.T) {
	dir := t.TempDir() // no node runs here
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"count", []string{"ping", "web-1", "--state-dir", dir, "-c", "0"}, "--count 0: must be positive"},
		{"interval", []string{"ping", "web-1", "--state-dir", dir, "-i", "-1s"}, "--interval -1s: must be positive"},
		{"timeout", []string{"ping", "web-1", "--state-dir", dir, "-W", "0"}, "--timeout 0s: must be positive"},
		{"empty peer", []string{"ping", "", "--state-dir", dir}, "PEER is empty"},
		{"ping empty state dir", []string{"ping", "web-1", "--state-dir", ""}, "--state-dir is empty"},
		{"status empty state dir", []string{"status", "--state-dir", ""}, "--state-dir is empty"},
		{"status in-memory node", []string{"status", "--state-dir", "mem:"}, "--state-dir mem: keeps no status socket"},
		{"netcheck in-memory node", []string{"netcheck", "--state-dir", "mem:"}, "--state-dir mem: keeps no status socket"},
		{"netcheck wait", []string{"netcheck", "--stun", "127.0.0.1:9", "--wait", "-1s"}, "--wait -1s: must be positive"},
		{"netcheck tries", []string{"netcheck", "--stun", "127.0.0.1:9", "--tries", "0"}, "--tries 0: must be positive"},
		{"netcheck tries before control", []string{"netcheck", "--control", "nats://127.0.0.1:9", "--token", "cli-test-token-0123456789", "--tries", "-1"}, "--tries -1: must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut strings.Builder
			assert.Equal(t, exitUsage, execute(t.Context(), tc.args, &out, &errOut), errOut.String())
			assert.Contains(t, errOut.String(), tc.want)
		})
	}
}
