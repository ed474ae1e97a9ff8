package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/latticelab/lattice/control/controlapi"
)

// Control answers a request on its reply subject, which the requester
// chose. Unchecked, that lets a node have control publish into another
// node's subjects (its signal.in or peers), where the NATS permissions
// would have stopped the node itself. So control publishes a reply only
// under the requester's own inbox, derived from who it is: a registered
// node (the subject's node ID, which only that node may publish under)
// gets InboxPrefix.<id>.…, a joining client InboxPrefix.join.<random>.…,
// the only inbox its permissions let it read (for registrations and
// servers requests alike).

// allowedReply reports whether reply is inside the inbox of whoever may
// publish on subject. An empty reply (nothing to publish) is allowed.
func allowedReply(subject, reply string) bool {
	if reply == "" {
		return true
	}
	if subject == controlapi.SubjectRegister || subject == controlapi.SubjectServers {
		rest, ok := strings.CutPrefix(reply, controlapi.InboxPrefix+"."+joinPrefix)
		if !ok {
			return false
		}
		id, tail, ok := strings.Cut(rest, ".")
		return ok && tail != "" && validInboxID(id)
	}
	id := nodeOf(subject)
	if id == "" || !strings.HasPrefix(subject, subjectNodes) {
		return false
	}
	tail, ok := strings.CutPrefix(reply, controlapi.InboxPrefix+"."+id+".")
	return ok && tail != ""
}

// replyAllowed checks m's reply subject (see allowedReply), and counts
// and logs a refusal. A refused request is not acted on at all.
func (s *Server) replyAllowed(m *nats.Msg) bool {
	if allowedReply(m.Subject, m.Reply) {
		return true
	}
	s.badReplies.Add(1)
	s.log.Warn("request refused: reply subject outside the requester's inbox",
		"subject", truncate(m.Subject, 120), "reply", truncate(m.Reply, 120))
	return false
}

// reply answers m with v as JSON; a reply that cannot be published is
// logged (see respond for callers that must know).
func (s *Server) reply(m *nats.Msg, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(controlapi.ErrorReply{Error: &controlapi.Error{Code: controlapi.CodeInternal, Message: err.Error()}})
	}
	_ = s.respond(m, b)
}

// respond publishes b on m's reply subject, if it is allowed, and returns
// the error of a reply that was not sent.
func (s *Server) respond(m *nats.Msg, b []byte) error {
	if m.Reply == "" {
		return nil
	}
	if !allowedReply(m.Subject, m.Reply) {
		return errBadReply
	}
	if err := m.Respond(b); err != nil {
		s.log.Warn("reply not sent", "subject", truncate(m.Subject, 120), "bytes", len(b), "err", err)
		return fmt.Errorf("reply to %s (%d bytes): %w", truncate(m.Subject, 120), len(b), err)
	}
	return nil
}

// errBadReply: the reply subject is outside the requester's inbox.
var errBadReply = errors.New("control: reply subject outside the requester's inbox")
