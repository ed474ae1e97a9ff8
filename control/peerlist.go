package control

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/latticelab/lattice/control/controlapi"
)

// The peer list of a large mesh does not fit one NATS message (64 KiB is
// about 465 peers), so it comes in pages, in node ID order.

func (s *Server) onPeerList(m *nats.Msg) {
	if !s.replyAllowed(m) {
		return
	}
	self := nodeOf(m.Subject)
	var req controlapi.PeerListRequest
	paged := len(m.Data) > 0
	if paged {
		if err := json.Unmarshal(m.Data, &req); err != nil {
			s.reply(m, controlapi.ErrorReply{Error: &controlapi.Error{Code: controlapi.CodeBadRequest, Message: "malformed peer list request: " + err.Error()}})
			return
		}
	}
	// Only the first page needs the barrier: the node that asks for the
	// next ones asked for the first after the events it applied.
	if req.After == "" {
		s.barrier.sync(context.Background(), "peer list")
	}
	limit := s.maxReply()
	if !paged {
		// A request without a body, from a node that does not page, gets
		// the whole list, or an error saying why not.
		peers, _, more, err := s.view.page("", self, limit, s.offline)
		switch {
		case err != nil:
			s.reply(m, controlapi.ErrorReply{Error: asError(err)})
		case more:
			s.reply(m, controlapi.ErrorReply{Error: &controlapi.Error{Code: controlapi.CodeBadRequest, Message: fmt.Sprintf("%d peers do not fit one message; ask by page (PeerListRequest)", s.view.len()-1)}})
		default:
			_ = s.respond(m, peers)
		}
		return
	}
	b, err := s.encodePeerPage(req.After, self, limit)
	if err != nil {
		s.reply(m, controlapi.ErrorReply{Error: asError(err)})
		return
	}
	_ = s.respond(m, b)
}

// encodePeerPage encodes the page of self's peers after the ID after that
// fits in limit bytes, from the view.
func (s *Server) encodePeerPage(after, self string, limit int) ([]byte, error) {
	// Read before the page: the view holds every change up to it.
	rev := s.barrier.appliedRev()
	revField := ""
	if rev > 0 {
		revField = `,"rev":` + strconv.FormatUint(rev, 10)
		if reg := s.registry(); reg != 0 {
			revField += `,"reg":` + strconv.FormatUint(reg, 10)
		}
	}
	peers, n, more, err := s.view.page(after, self, limit-len(`{"peers":,"more":true}`)-len(revField), s.offline)
	if err != nil {
		return nil, fmt.Errorf("encode peer page: %w", err)
	}
	if n == 0 && more {
		return nil, fmt.Errorf("the peer after %q alone is over the %d bytes a message may carry", truncate(after, 40), limit)
	}
	b := make([]byte, 0, len(peers)+len(`{"peers":,"more":true}`)+len(revField))
	b = append(append(b, `{"peers":`...), peers...)
	if more {
		b = append(b, `,"more":true`...)
	}
	return append(append(b, revField...), '}'), nil
}
