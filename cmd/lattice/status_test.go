package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/node"
)

func sampleStatus() statusReply {
	hs := time.Date(2026, 12, 1, 20, 7, 25, 0, time.UTC)
	return statusReply{
		Name: "alpha", NodeID: "n-alpha", Address: "100.64.0.1/10", LivenessTimeoutMillis: 15000,
		Mux: node.MuxStats{STUN: 1, WireGuard: 2, Other: 3, STUNDropped: 4, WireGuardDropped: 5},
		Peers: []node.PeerStatus{
			{
				Peer:   controlapi.Peer{NodeID: "n-web", Name: "web-1", PublicKey: key.Public{1}, Address: netip.MustParsePrefix("100.64.1.2/10")},
				Online: true, Path: node.PathDirect, Endpoint: "192.0.2.7:51820",
				RTT: 1500 * time.Microsecond, LastHandshake: hs, MTU: 1420, MTUReason: "direct",
				TxDirect: 1000, TxRelay: 234, RxDirect: 5000, RxRelay: 678,
				History: []node.PathEvent{{Time: hs, To: node.PathDirect, Addr: netip.MustParseAddrPort("192.0.2.7:51820"), Reason: "ICE nominated a pair"}},
				ICE: node.ICEReport{Session: 7, State: "connected", LocalCandidates: []string{"l"}, RemoteCandidates: []string{"r"},
					SelfCandidates: []string{"s"}, Pairs: []string{"p"}, Err: "e"},
			},
			{
				Peer: controlapi.Peer{NodeID: "n-db", Name: "db-1", PublicKey: key.Public{2}, Address: netip.MustParsePrefix("100.64.1.3/10"), Offline: true},
				Path: node.PathOffline, History: []node.PathEvent{},
			},
		},
	}
}

func keys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// TestStatusJSONShape pins `lattice status --json`: snake_case keys, units
// in the names, RFC 3339 times; and it reads back into the same status.
func TestStatusJSONShape(t *testing.T) {
	st := sampleStatus()
	raw, err := json.Marshal(st)
	require.NoError(t, err)
	var top map[string]any
	require.NoError(t, json.Unmarshal(raw, &top))
	assert.Equal(t, []string{"address", "liveness_timeout_ms", "mux", "name", "node_id", "peers"}, keys(top))
	assert.Equal(t, []string{"other_datagrams", "stun_datagrams", "stun_dropped", "wireguard_datagrams", "wireguard_dropped"},
		keys(top["mux"].(map[string]any)))
	peers := top["peers"].([]any)
	require.Len(t, peers, 2)
	web, db := peers[0].(map[string]any), peers[1].(map[string]any)
	assert.Equal(t, []string{"address", "endpoint", "history", "ice", "last_handshake", "mtu", "mtu_reason", "name", "node_id", "online", "path",
		"public_key", "rtt_ms", "rx_bytes", "rx_direct_bytes", "rx_relay_bytes", "state", "tx_bytes", "tx_direct_bytes",
		"tx_relay_bytes"}, keys(web))
	assert.Equal(t, keys(web), keys(db), "an offline peer has the same keys")
	assert.Equal(t, []string{"error", "local_candidates", "pairs", "remote_candidates", "self_candidates", "session", "state"},
		keys(web["ice"].(map[string]any)))
	assert.Equal(t, []string{"addr", "reason", "time", "to"}, keys(web["history"].([]any)[0].(map[string]any)))

	assert.Equal(t, "web-1", web["name"])
	assert.Equal(t, 1.5, web["rtt_ms"])
	assert.Equal(t, "2026-12-01T20:07:25Z", web["last_handshake"])
	assert.Equal(t, true, web["online"])
	assert.Equal(t, "online", web["state"])
	assert.Equal(t, "direct", web["path"])
	assert.Equal(t, 1420.0, web["mtu"])
	assert.Equal(t, "direct", web["mtu_reason"])
	assert.Equal(t, 1234.0, web["tx_bytes"])
	assert.Equal(t, 5678.0, web["rx_bytes"])
	assert.Equal(t, "100.64.1.2/10", web["address"])
	assert.Equal(t, false, db["online"])
	assert.Equal(t, "offline", db["state"])
	assert.Equal(t, "offline", db["path"])
	assert.Nil(t, db["last_handshake"], "null before the first handshake")
	assert.Equal(t, []any{}, db["history"])

	var back statusReply
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, st, back, "the JSON reads back into the same status")

	require.ErrorContains(t, json.Unmarshal([]byte(`{"peers":[{"name":"x","rtt_ms":-1}]}`), &back), `peer status "x": rtt_ms -1 out of range`)
}

// TestStatusHelpExamplesWork runs the jq lines in `status --help` on
// the JSON the command prints.
func TestStatusHelpExamplesWork(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is not installed (scripts/deps.sh installs it)")
	}
	raw, err := json.Marshal(sampleStatus())
	require.NoError(t, err)
	var filters []string
	for line := range strings.Lines(newStatusCmd().Example) {
		_, rest, ok := strings.Cut(line, "| jq ")
		if !ok {
			continue
		}
		rest = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), "-r "))
		filters = append(filters, strings.Trim(rest, "'"))
	}
	require.Len(t, filters, 2)
	want := []string{"web-1 online direct 1.5ms\ndb-1 offline offline 0ms\n", "[\n  \"db-1\"\n]\n"}
	for i, f := range filters {
		cmd := exec.Command("jq", "-r", f)
		cmd.Stdin = bytes.NewReader(raw)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "jq %s: %s", f, out)
		assert.Equal(t, want[i], string(out), "jq %s", f)
	}
}

func TestStatusTable(t *testing.T) {
	var b bytes.Buffer
	st := sampleStatus()
	printStatus(&b, &st)
	out := b.String()
	assert.Contains(t, out, "shown offline 15s after their last heartbeat")
	assert.Regexp(t, `db-1\s+100\.64\.1\.3\s+offline\s+offline\s+-`, out)
	assert.Regexp(t, `web-1\s+100\.64\.1\.2\s+online\s+direct\s+192\.0\.2\.7:51820\s+1\.5ms`, out)
}

// TestStatusBadReply: what answers on the socket but is not a node's
// status (an error page, cut-off JSON) is reported with the socket it
// came from, not as a bare JSON error.
func TestStatusBadReply(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		handler    http.HandlerFunc
	}{
		{"server error", "status from SOCK: 500 Internal Server Error: boom", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "boom", http.StatusInternalServerError)
		}},
		{"cut-off JSON", "status from SOCK: not a node's status reply: unexpected end of JSON input", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"peers":`))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sock := filepath.Join(dir, "lattice.sock")
			ln, err := net.Listen("unix", sock)
			require.NoError(t, err)
			srv := &http.Server{Handler: tc.handler, ReadHeaderTimeout: 5 * time.Second}
			done := make(chan struct{})
			go func() { defer close(done); _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close(); <-done })
			var out, errOut strings.Builder
			assert.Equal(t, exitFailure, execute(t.Context(), []string{"status", "--state-dir", dir}, &out, &errOut))
			assert.Contains(t, errOut.String(), strings.ReplaceAll(tc.want, "SOCK", sock))
		})
	}
}
