package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// RelayTokenResponse answers a LeafRelayToken request.
type RelayTokenResponse struct {
	Token string `json:"token"`
}

// onRelayToken issues a fresh relay token to the node the subject names.
// The NATS permissions guarantee only that node can publish there, so
// the token is for its own key and no one else's.
func (s *Server) onRelayToken(m *nats.Msg) {
	if !s.replyAllowed(m) {
		return
	}
	id := nodeOf(m.Subject)
	if s.cfg.RelayToken == nil {
		s.reply(m, errorReply{&Error{Code: CodeNotFound, Message: "this control issues no relay tokens"}})
		return
	}
	n, err := s.cfg.Store.Get(context.Background(), id)
	if errors.Is(err, ErrNotFound) {
		s.reply(m, errorReply{&Error{Code: CodeNotFound, Message: fmt.Sprintf("no node %q", truncate(id, 40))}})
		return
	}
	if err != nil {
		s.log.Warn("relay token", "id", id, "err", err)
		s.reply(m, errorReply{&Error{Code: CodeInternal, Message: "look up the node: " + err.Error()}})
		return
	}
	tok, err := s.cfg.RelayToken(n.PublicKey, s.cfg.Now())
	if err != nil {
		s.log.Warn("relay token", "id", id, "err", err)
		s.reply(m, errorReply{&Error{Code: CodeInternal, Message: "issue relay token: " + err.Error()}})
		return
	}
	s.reply(m, RelayTokenResponse{Token: tok})
}

// RelayToken asks control for a fresh relay token for this node's key
// (LeafRelayToken). A node calls it before its token expires, and at once
// when a relay says it has.
func (s *Session) RelayToken(ctx context.Context) (string, error) {
	r, err := s.nc.RequestWithContext(ctx, NodeSubject(s.id, LeafRelayToken), nil)
	if err != nil {
		return "", fmt.Errorf("relay token: %w", err)
	}
	var resp RelayTokenResponse
	if err := decodeReply(r.Data, &resp); err != nil {
		return "", fmt.Errorf("relay token: %w", err)
	}
	if resp.Token == "" {
		return "", errors.New("relay token: control answered with an empty token")
	}
	return resp.Token, nil
}
