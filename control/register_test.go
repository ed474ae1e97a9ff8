package control

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// TestEncodeRegistrationIsMarshal: the answer built around the view's
// encoded peers is byte for byte what json.Marshal makes of the same
// answer, with the first peers in ID order (self skipped, offline ones
// marked) and MorePeers set exactly when some did not fit.
func TestEncodeRegistrationIsMarshal(t *testing.T) {
	tests := []struct {
		name      string
		nodes     int
		limit     int
		wantSent  int // -1: fewer than nodes-1, more than 0
		wantMore  bool
		wantError string
	}{
		{name: "alone", nodes: 1, limit: 64 << 10, wantSent: 0},
		{name: "all fit", nodes: 20, limit: 64 << 10, wantSent: 19},
		{name: "first page bounded", nodes: 400, limit: 64 << 10, wantSent: -1, wantMore: true},
		{name: "message bounded", nodes: 40, limit: 3 << 10, wantSent: -1, wantMore: true},
		{name: "no room for the answer", nodes: 5, limit: 200, wantError: "over the 200 a NATS message may carry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{view: newView(), seen: map[string]time.Time{}, cfg: Config{Now: time.Now}}
			var self string
			for i := range tt.nodes {
				pub := key.Public(sha256.Sum256(fmt.Appendf(nil, "encode %d", i)))
				n := &Node{ID: nodeID(pub), Name: fmt.Sprintf("n%d", i), PublicKey: pub, Epoch: uint64(i + 1), SharedEvents: true,
					Address: netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 64, 0, byte(i)}), Overlay.Bits())}
				s.view.put(n, 0)
				if i%3 == 0 {
					s.markOnline(n.ID)
				}
				if i == tt.nodes/2 {
					self = n.ID
				}
			}
			resp := &controlapi.RegisterResponse{NodeID: self, Address: netip.MustParsePrefix("100.64.9.9/10"), Relays: []controlapi.Relay{{Addr: "relay:443"}},
				STUN: []string{"stun:3478"}, NATS: controlapi.NATSCreds{URL: "nats://x", User: self, Password: "p", Inbox: controlapi.InboxPrefix + "." + self}, Epoch: 7}
			b, sent, err := s.encodeRegistration(resp, self, tt.limit)
			if tt.wantError != "" {
				require.ErrorContains(t, err, tt.wantError)
				return
			}
			require.NoError(t, err)
			assert.LessOrEqual(t, len(b), tt.limit)
			assert.Empty(t, resp.Peers, "resp.Peers is left empty")
			assert.Equal(t, tt.wantMore, resp.MorePeers)
			if tt.wantSent >= 0 {
				assert.Equal(t, tt.wantSent, sent)
			} else {
				assert.Greater(t, sent, 0)
				assert.Less(t, sent, tt.nodes-1)
			}

			var got controlapi.RegisterResponse
			require.NoError(t, json.Unmarshal(b, &got))
			require.Len(t, got.Peers, sent)
			want := *resp
			want.Peers = make([]controlapi.Peer, 0, sent)
			for _, id := range s.view.ids {
				if len(want.Peers) == sent {
					break
				}
				if id == self {
					continue
				}
				p := s.view.get(id).peer()
				p.Offline = s.offline(id)
				want.Peers = append(want.Peers, p)
			}
			wb, err := json.Marshal(&want)
			require.NoError(t, err)
			assert.Equal(t, string(wb), string(b))
		})
	}
}
