package control

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/latticelab/lattice/control/controlapi"
)

// The servers request lets a client that holds only a join token (lattice
// netcheck on a host with no node) learn the relays and STUN servers a
// registration would announce. It is judged like a registration's token,
// stores nothing and issues nothing: no relay token, no NATS credentials,
// no peers. A registered key whose token expired gets no list here: it
// has its servers from its own registration.

// maxServersRequestBytes bounds a servers request: a token and its JSON.
const maxServersRequestBytes = controlapi.MaxTokenBytes + 64

// decodeServersRequest parses a servers request strictly.
func decodeServersRequest(b []byte) (*controlapi.ServersRequest, error) {
	if len(b) > maxServersRequestBytes {
		return nil, &controlapi.Error{Code: controlapi.CodeBadRequest, Message: fmt.Sprintf("servers request is %d bytes, at most %d", len(b), maxServersRequestBytes)}
	}
	var r controlapi.ServersRequest
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, &controlapi.Error{Code: controlapi.CodeBadRequest, Message: "malformed servers request: " + err.Error()}
	}
	switch {
	case r.Token == "":
		return nil, &controlapi.Error{Code: controlapi.CodeBadToken, Message: "no join token"}
	case len(r.Token) > controlapi.MaxTokenBytes:
		return nil, &controlapi.Error{Code: controlapi.CodeBadRequest, Message: fmt.Sprintf("token is %d bytes, at most %d", len(r.Token), controlapi.MaxTokenBytes)}
	}
	return &r, nil
}

// handleServers answers a servers request body, over NATS and HTTP alike.
func (s *Server) handleServers(body []byte) (*controlapi.ServersResponse, error) {
	req, err := decodeServersRequest(body)
	if err == nil {
		_, err = s.tokens.check(req.Token, s.cfg.Now())
	}
	if err != nil {
		s.log.Info("servers request refused", "err", err)
		return nil, err
	}
	resp := &controlapi.ServersResponse{Relays: s.cfg.Relays, STUN: s.cfg.STUN}
	if resp.Relays == nil {
		resp.Relays = []controlapi.Relay{}
	}
	if resp.STUN == nil {
		resp.STUN = []string{}
	}
	return resp, nil
}

func (s *Server) onServers(m *nats.Msg) {
	if !s.replyAllowed(m) {
		return
	}
	resp, err := s.handleServers(m.Data)
	if err != nil {
		s.reply(m, controlapi.ErrorReply{Error: asError(err)})
		return
	}
	s.reply(m, resp)
}
