package control

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/latticelab/lattice/control/controlapi"
)

// Presence is separate from identity. A registered node keeps its ID, key
// and address while it is down; presence says whether it is running. A
// node is online from its registration (or control's start) while its
// heartbeats (LeafPresence, every PresenceTTL/3) keep coming; it goes
// offline when it says so on the way out, or PresenceTTL after its last
// heartbeat (killed, or its network lost). Each change is a PeerOffline or
// PeerOnline event to every other node, and peer lists carry it
// (Peer.Offline).
//
// Several control instances sharing a KV registry each track presence:
// heartbeats reach every instance (the subscription has no queue group),
// so they agree, and a change may be announced once per instance; nodes
// take repeated events as no change.

// DefaultPresenceTTL is Config.PresenceTTL's default.
const DefaultPresenceTTL = 15 * time.Second

// presenceLoop expires nodes whose heartbeats stopped, until ctx ends.
func (s *Server) presenceLoop(ctx context.Context) {
	t := time.NewTicker(max(s.cfg.PresenceTTL/10, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.expire(ctx, s.cfg.Now())
	}
}

// expire takes offline, and announces, the nodes without a sign of life
// in the PresenceTTL before now.
func (s *Server) expire(ctx context.Context, now time.Time) {
	s.announceMu.Lock()
	defer s.announceMu.Unlock()
	var expired []string
	s.presMu.Lock()
	for id, seen := range s.seen {
		if now.Sub(seen) > s.cfg.PresenceTTL {
			delete(s.seen, id)
			expired = append(expired, id)
		}
	}
	s.presMu.Unlock()
	for _, id := range expired {
		s.log.Info("node offline: no heartbeat", "id", id, "ttl", s.cfg.PresenceTTL)
	}
	s.announcePresence(ctx, expired, controlapi.PeerOffline)
}

// markOnline records a sign of life from id and reports whether it was
// offline before.
func (s *Server) markOnline(id string) bool {
	s.presMu.Lock()
	defer s.presMu.Unlock()
	_, was := s.seen[id]
	s.seen[id] = s.cfg.Now()
	return !was
}

// markOffline forgets id's presence and reports whether it was online.
func (s *Server) markOffline(id string) bool {
	s.presMu.Lock()
	defer s.presMu.Unlock()
	_, was := s.seen[id]
	delete(s.seen, id)
	return was
}

// online reports whether id is present.
func (s *Server) online(id string) bool {
	s.presMu.Lock()
	defer s.presMu.Unlock()
	_, ok := s.seen[id]
	return ok
}

// offline reports whether id is not present.
func (s *Server) offline(id string) bool { return !s.online(id) }

func (s *Server) onPresence(m *nats.Msg) {
	if !s.replyAllowed(m) {
		return
	}
	id := nodeOf(m.Subject)
	var req controlapi.PresenceRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		s.reply(m, controlapi.ErrorReply{Error: &controlapi.Error{Code: controlapi.CodeBadRequest, Message: "malformed presence: " + err.Error()}})
		return
	}
	// Not found, the node registers again (its record was lost while it
	// ran); a registry that cannot be read says so instead, or every node
	// would register again at once over a store's passing failure.
	if e := s.unregistered(id); e != nil {
		s.reply(m, controlapi.ErrorReply{Error: e})
		return
	}
	if n := s.view.get(id); n != nil && req.Epoch != 0 && req.Epoch < n.Epoch {
		// From an earlier life of the node: a goodbye (or a heartbeat)
		// still in flight when it registered again, restarted. Taken,
		// its goodbye would show the running node offline until its next
		// heartbeat.
		s.log.Debug("presence from an earlier registration ignored", "id", id, "epoch", req.Epoch, "current", n.Epoch)
		s.reply(m, struct{}{})
		return
	}
	ctx := context.Background()
	s.announceMu.Lock()
	switch {
	case req.Online && s.markOnline(id):
		s.log.Info("node online", "id", id)
		s.announcePresence(ctx, []string{id}, controlapi.PeerOnline)
	case !req.Online && s.markOffline(id):
		s.log.Info("node offline: it left", "id", id)
		s.announcePresence(ctx, []string{id}, controlapi.PeerOffline)
	}
	s.announceMu.Unlock()
	s.reply(m, struct{}{})
}

// announcePresence tells every other node that the nodes ids went online
// or offline: one event each (fanout.go). Called with announceMu held,
// since the change was made.
func (s *Server) announcePresence(_ context.Context, ids []string, t controlapi.PeerEventType) {
	for _, id := range ids {
		n := s.view.get(id)
		if n == nil {
			continue // deregistered meanwhile
		}
		p := n.peer()
		p.Offline = t == controlapi.PeerOffline
		s.publishEvent(controlapi.PeerEvent{Type: t, Peer: p})
	}
}
