package node

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// PeerStatus, PathEvent, ICEReport and MuxStats travel as JSON (`lattice
// status --json`, the sandbox's status socket) in snake_case with units
// in the names: a peer is one flat object,
//
//	{"name": "web-1", "node_id": "…", "address": "100.64.1.2/10", "public_key": "…",
//	 "online": true, "state": "online", "path": "direct", "endpoint": "192.0.2.7:51820",
//	 "rtt_ms": 0.42, "last_handshake": "2026-12-01T20:07:25Z",
//	 "tx_bytes": 1234, "rx_bytes": 5678, "tx_direct_bytes": 1000, "tx_relay_bytes": 234,
//	 "rx_direct_bytes": 5000, "rx_relay_bytes": 678,
//	 "history": [{"time": "…", "to": "relay", "addr": "", "reason": "…"}],
//	 "ice": {"session": 1, "state": "connected", "local_candidates": […], "remote_candidates": […],
//	         "self_candidates": […], "pairs": […], "error": ""},
//	 "why": "attempt timed out after 10s: …, next in 8s",
//	 "mtu": 1376, "mtu_reason": "relayed over QUIC datagrams"}
//
// state is "online" or "offline" (online as a word); path is "direct",
// "relay" or "offline"; endpoint is empty when offline; last_handshake is
// RFC 3339, null before the first; mtu is 0 and mtu_reason empty while
// offline.
type peerStatusJSON struct {
	Name      string       `json:"name"`
	NodeID    string       `json:"node_id"`
	Address   netip.Prefix `json:"address"`
	PublicKey key.Public   `json:"public_key"`

	Online        bool       `json:"online"`
	State         string     `json:"state"`
	Path          PathKind   `json:"path"`
	Endpoint      string     `json:"endpoint"`
	RTTMillis     float64    `json:"rtt_ms"`
	LastHandshake *time.Time `json:"last_handshake"`

	TxBytes       uint64 `json:"tx_bytes"`
	RxBytes       uint64 `json:"rx_bytes"`
	TxDirectBytes uint64 `json:"tx_direct_bytes"`
	TxRelayBytes  uint64 `json:"tx_relay_bytes"`
	RxDirectBytes uint64 `json:"rx_direct_bytes"`
	RxRelayBytes  uint64 `json:"rx_relay_bytes"`

	History []PathEvent `json:"history"`
	ICE     ICEReport   `json:"ice"`
	Why     string      `json:"why,omitempty"`

	MTU       int    `json:"mtu"`
	MTUReason string `json:"mtu_reason"`
}

// MarshalJSON implements json.Marshaler (the shape above).
func (s PeerStatus) MarshalJSON() ([]byte, error) {
	j := peerStatusJSON{
		Name: s.Peer.Name, NodeID: s.Peer.NodeID, Address: s.Peer.Address, PublicKey: s.Peer.PublicKey,
		Online: s.Online, State: "offline", Path: s.Path, Endpoint: s.Endpoint,
		RTTMillis: float64(s.RTT) / float64(time.Millisecond),
		TxBytes:   s.TxDirect + s.TxRelay, RxBytes: s.RxDirect + s.RxRelay,
		TxDirectBytes: s.TxDirect, TxRelayBytes: s.TxRelay, RxDirectBytes: s.RxDirect, RxRelayBytes: s.RxRelay,
		History: s.History, ICE: s.ICE, Why: s.Why, MTU: s.MTU, MTUReason: s.MTUReason,
	}
	if s.Online {
		j.State = "online"
	}
	if !s.LastHandshake.IsZero() {
		t := s.LastHandshake.UTC()
		j.LastHandshake = &t
	}
	if j.History == nil {
		j.History = []PathEvent{}
	}
	return json.Marshal(j)
}

// UnmarshalJSON implements json.Unmarshaler (the shape above).
func (s *PeerStatus) UnmarshalJSON(b []byte) error {
	var j peerStatusJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("peer status: %w", err)
	}
	if math.IsNaN(j.RTTMillis) || j.RTTMillis < 0 || j.RTTMillis > float64(math.MaxInt64/int64(time.Millisecond)) {
		return fmt.Errorf("peer status %q: rtt_ms %v out of range", j.Name, j.RTTMillis)
	}
	*s = PeerStatus{
		Peer:   controlapi.Peer{NodeID: j.NodeID, Name: j.Name, PublicKey: j.PublicKey, Address: j.Address, Offline: !j.Online},
		Online: j.Online, Path: j.Path, Endpoint: j.Endpoint,
		RTT:      time.Duration(math.Round(j.RTTMillis * float64(time.Millisecond))),
		TxDirect: j.TxDirectBytes, TxRelay: j.TxRelayBytes, RxDirect: j.RxDirectBytes, RxRelay: j.RxRelayBytes,
		History: j.History, ICE: j.ICE, Why: j.Why, MTU: j.MTU, MTUReason: j.MTUReason,
	}
	if j.LastHandshake != nil {
		s.LastHandshake = *j.LastHandshake
	}
	return nil
}
