package scenario

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/node"
)

// longEnv answers the long-horizon steps: NAT mappings, an echo
// connection, presence and a stopped node's identity.
type longEnv struct {
	*fakeEnv
	now      time.Time
	mappings []nat.MappingInfo
	echoes   int // how many messages the echo server answers; then it goes silent
	presence []bool
	last     string
}

func (e *longEnv) NATMappings(string) (string, time.Time, []nat.MappingInfo, error) {
	return "home-nat", e.now, e.mappings, nil
}

func (e *longEnv) EchoConn(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	go func() {
		defer server.Close()
		buf := make([]byte, 4096)
		for i := 0; ; i++ {
			n, err := server.Read(buf)
			if err != nil {
				return
			}
			if i >= e.echoes {
				_, _ = io.Copy(io.Discard, server) // silent, like a NAT that forgot the flow
				return
			}
			if _, err := server.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	return client, nil
}

func (e *longEnv) WaitPresence(ctx context.Context, _, _ string, online bool) (node.PeerStatus, error) {
	for _, p := range e.presence {
		if p == online {
			path := node.PathOffline
			if online {
				path = node.PathDirect
			}
			return node.PeerStatus{Online: p, Path: path}, nil
		}
	}
	<-ctx.Done()
	return node.PeerStatus{}, context.Cause(ctx)
}

func (e *longEnv) LastIdentity(string) (string, netip.Addr, bool) {
	return e.last, netip.MustParseAddr("100.64.0.1"), e.last != ""
}

func TestRunLongHorizonSteps(t *testing.T) {
	now := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
	udp := func(made, idle time.Duration) nat.MappingInfo {
		return nat.MappingInfo{Proto: nat.UDP, Inside: netip.MustParseAddrPort("192.168.1.2:51820"),
			External: netip.MustParseAddrPort("203.0.113.10:51820"), Created: now.Add(-made),
			LastActive: now.Add(-idle), Expires: now.Add(-idle).Add(2 * time.Minute)}
	}
	tcp := udp(time.Minute, time.Minute)
	tcp.Proto = nat.TCP
	tests := []struct {
		name       string
		action     Action
		env        *longEnv
		wantDetail string
		wantErr    string
	}{
		{
			name:       "mapping present and old enough",
			action:     &NATMapping{Node: "alice", Expect: "present", MinAge: 10 * time.Minute},
			env:        &longEnv{mappings: []nat.MappingInfo{udp(12*time.Minute, 10*time.Second), tcp}},
			wantDetail: "home-nat: 192.168.1.2:51820 → 203.0.113.10:51820 (made 12m0s ago, idle 10s, expires in 1m50s)",
		},
		{
			name:    "mapping made anew",
			action:  &NATMapping{Node: "alice", Expect: "present", MinAge: 10 * time.Minute},
			env:     &longEnv{mappings: []nat.MappingInfo{udp(30*time.Second, 0)}},
			wantErr: "home-nat's oldest udp mapping of alice was made 30s ago, want 10m0s or more: 192.168.1.2:51820 → 203.0.113.10:51820 (made 30s ago, idle 0s, expires in 2m0s)",
		},
		{
			name:    "mapping missing",
			action:  &NATMapping{Node: "alice", Expect: "present"},
			env:     &longEnv{mappings: []nat.MappingInfo{tcp}},
			wantErr: "home-nat has no udp mapping of alice",
		},
		{
			name:    "mapping still there",
			action:  &NATMapping{Node: "alice", Proto: "tcp", Expect: "absent"},
			env:     &longEnv{mappings: []nat.MappingInfo{udp(time.Minute, 0), tcp}},
			wantErr: "home-nat still has 1 tcp mapping(s) of alice: 192.168.1.2:51820 → 203.0.113.10:51820 (made 1m0s ago, idle 1m0s, expires in 1m0s)",
		},
		{
			name:       "mapping gone",
			action:     &NATMapping{Node: "alice", Expect: "absent"},
			env:        &longEnv{mappings: []nat.MappingInfo{tcp}},
			wantDetail: "home-nat: no udp mapping of alice",
		},
		{
			name:       "tcp alive after the idle spell",
			action:     &TCPIdle{From: "alice", To: "server", Idle: time.Millisecond, Expect: "alive"},
			env:        &longEnv{echoes: 2},
			wantDetail: "alive after 1ms idle, from pipe",
		},
		{
			name:    "tcp dropped though wanted alive",
			action:  &TCPIdle{From: "alice", To: "server", Idle: time.Millisecond, Expect: "alive", Within: 50 * time.Millisecond},
			env:     &longEnv{echoes: 1},
			wantErr: "from pipe: no echo after 1ms idle: not within 50ms (read pipe: i/o timeout)",
		},
		{
			name:       "tcp dropped as wanted",
			action:     &TCPIdle{From: "alice", To: "server", Idle: time.Millisecond, Expect: "dropped", Within: 50 * time.Millisecond},
			env:        &longEnv{echoes: 1},
			wantDetail: "dropped after 1ms idle: no echo after 1ms idle: not within 50ms (read pipe: i/o timeout)",
		},
		{
			name:    "tcp alive though wanted dropped",
			action:  &TCPIdle{From: "alice", To: "server", Idle: time.Millisecond, Expect: "dropped"},
			env:     &longEnv{echoes: 2},
			wantErr: "from pipe: the connection still works after 1ms idle, want it dropped",
		},
		{
			name:    "tcp never echoes",
			action:  &TCPIdle{From: "alice", To: "server", Idle: time.Millisecond, Expect: "dropped", Within: 50 * time.Millisecond},
			env:     &longEnv{},
			wantErr: "no echo before the idle spell: not within 50ms (read pipe: i/o timeout)",
		},
		{
			name:       "peer offline",
			action:     &Presence{From: "alice", Peer: "bob", Status: "offline"},
			env:        &longEnv{presence: []bool{false}},
			wantDetail: "bob: offline",
		},
		{
			name:    "peer never offline",
			action:  &Presence{From: "alice", Peer: "bob", Status: "offline", Within: 20 * time.Millisecond},
			env:     &longEnv{presence: []bool{true}},
			wantErr: "not within 20ms",
		},
		{
			name:       "started again with its identity",
			action:     &Start{Node: "alice"},
			env:        &longEnv{fakeEnv: &fakeEnv{ids: map[string][]string{"alice": {"n1"}}}, last: "n1"},
			wantDetail: "same identity n1, 100.64.0.1",
		},
		{
			name:    "started again as someone else",
			action:  &Start{Node: "alice"},
			env:     &longEnv{fakeEnv: &fakeEnv{ids: map[string][]string{"alice": {"n2"}}}, last: "n1"},
			wantErr: "alice came back as n2, was n1",
		},
		{
			name:   "first start: nothing to compare",
			action: &Start{Node: "alice"},
			env:    &longEnv{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.env.now = now
			if tt.env.fakeEnv == nil {
				tt.env.fakeEnv = &fakeEnv{}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			detail, _, err := tt.action.Run(ctx, tt.env)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tt.wantErr, err.Error())
			} else {
				require.NoError(t, err)
			}
			if tt.wantDetail != "" || tt.wantErr == "" {
				assert.Equal(t, tt.wantDetail, detail)
			}
		})
	}
}
