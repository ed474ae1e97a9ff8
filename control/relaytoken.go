package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/latticelab/lattice/control/controlapi"
)

// onRelayToken issues a fresh relay token to the node the subject names.
// The NATS permissions guarantee only that node can publish there, so
// the token is for its own key and no one else's.
func (s *Server) onRelayToken(m *nats.Msg) {
	if !s.replyAllowed(m) {
		return
	}
	id := nodeOf(m.Subject)
	if s.cfg.RelayToken == nil {
		s.reply(m, controlapi.ErrorReply{Error: &controlapi.Error{Code: controlapi.CodeNotFound, Message: "this control issues no relay tokens"}})
		return
	}
	n, err := s.cfg.Store.Get(context.Background(), id)
	if errors.Is(err, ErrNotFound) {
		s.reply(m, controlapi.ErrorReply{Error: &controlapi.Error{Code: controlapi.CodeNotFound, Message: fmt.Sprintf("no node %q", truncate(id, 40))}})
		return
	}
	if err != nil {
		s.log.Warn("relay token", "id", id, "err", err)
		s.reply(m, controlapi.ErrorReply{Error: &controlapi.Error{Code: controlapi.CodeInternal, Message: "look up the node: " + err.Error()}})
		return
	}
	tok, err := s.cfg.RelayToken(n.PublicKey, s.cfg.Now())
	if err != nil {
		s.log.Warn("relay token", "id", id, "err", err)
		s.reply(m, controlapi.ErrorReply{Error: &controlapi.Error{Code: controlapi.CodeInternal, Message: "issue relay token: " + err.Error()}})
		return
	}
	s.reply(m, controlapi.RelayTokenResponse{Token: tok})
}
