package control

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
)

// The peer list of a large mesh does not fit one NATS message (64 KiB is
// about 465 peers), so it comes in pages, in node ID order.

// PeerListRequest asks for the page of peers after After (a node ID; empty
// for the first page).
type PeerListRequest struct {
	After string `json:"after,omitempty"`
}

// PeerPage is a page of the peer list; More says another follows.
type PeerPage struct {
	Peers []Peer `json:"peers"`
	More  bool   `json:"more,omitempty"`
}

func (s *Server) onPeerList(m *nats.Msg) {
	if !s.replyAllowed(m) {
		return
	}
	self := nodeOf(m.Subject)
	var req PeerListRequest
	paged := len(m.Data) > 0
	if paged {
		if err := json.Unmarshal(m.Data, &req); err != nil {
			s.reply(m, errorReply{&Error{Code: CodeBadRequest, Message: "malformed peer list request: " + err.Error()}})
			return
		}
	}
	all, err := s.cfg.Store.List(context.Background())
	if err != nil {
		s.reply(m, errorReply{asError(err)})
		return
	}
	peers := []Peer{}
	for _, n := range all { // List is in ID order
		if n.ID != self && n.ID > req.After {
			peers = append(peers, s.peerOf(n))
		}
	}
	limit := s.maxReply()
	if !paged {
		// A request without a body, from a node that does not page, gets
		// the whole list, or an error saying why not.
		b, _ := json.Marshal(peers)
		if len(b) > limit {
			s.reply(m, errorReply{&Error{Code: CodeBadRequest, Message: fmt.Sprintf("%d peers do not fit one message; ask by page (PeerListRequest)", len(peers))}})
			return
		}
		_ = s.respond(m, b)
		return
	}
	b, err := encodePeerPage(peers, limit)
	if err != nil {
		s.reply(m, errorReply{asError(err)})
		return
	}
	_ = s.respond(m, b)
}

// encodePeerPage encodes as many of peers as fit in limit bytes.
func encodePeerPage(peers []Peer, limit int) ([]byte, error) {
	size, fit := len(`{"peers":[],"more":true}`), len(peers)
	for i, p := range peers {
		pb, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("encode peer page: %w", err)
		}
		if size += len(pb) + 1; size > limit {
			fit = i
			break
		}
	}
	if fit == 0 && len(peers) > 0 {
		return nil, fmt.Errorf("peer %s alone is over the %d bytes a message may carry", peers[0].NodeID, limit)
	}
	b, err := json.Marshal(PeerPage{Peers: peers[:fit], More: fit < len(peers)})
	if err != nil {
		return nil, fmt.Errorf("encode peer page: %w", err)
	}
	return b, nil
}
