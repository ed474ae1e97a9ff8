package control

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/latticelab/lattice/control/controlapi"
)

// A registration is answered before anything of it is announced: control
// prepares the reply, stores the node, sends the reply, and only then
// tells the other nodes. A reply that cannot be sent undoes the store, so
// the registry never holds a node that was not told its credentials.

func (s *Server) onRegister(m *nats.Msg) {
	if !s.replyAllowed(m) {
		s.refused.Add(1)
		return
	}
	_, err := s.registerAndSend(context.Background(), m.Data, func(b []byte) error { return s.respond(m, b) })
	if err != nil {
		s.reply(m, controlapi.ErrorReply{Error: asError(err)})
	}
}

// handleRegister is the registration both transports share; the caller
// sends the answer (HTTP), so a failure to send it is not seen here.
func (s *Server) handleRegister(ctx context.Context, body []byte) (*controlapi.RegisterResponse, error) {
	return s.registerAndSend(ctx, body, nil)
}

// registerAndSend registers the node body asks for. send, if not nil,
// delivers the encoded answer; if it fails, the registration is undone
// and its error returned.
func (s *Server) registerAndSend(ctx context.Context, body []byte, send func([]byte) error) (*controlapi.RegisterResponse, error) {
	req, err := decodeRequest(body)
	var adm admission
	if err == nil {
		adm, err = s.admit(ctx, req)
	}
	if err != nil {
		s.refused.Add(1)
		s.log.Info("registration refused", "err", err)
		return nil, err
	}
	challenge, err := s.checkProof(req)
	if err != nil {
		s.refused.Add(1)
		s.log.Warn("registration refused", "name", req.Name, "public_key", req.PublicKey.ShortString(), "err", err)
		return nil, err
	}
	if challenge {
		c, err := s.challenges.issue(req.PublicKey, s.cfg.Now())
		if err != nil {
			return nil, err
		}
		s.challenged.Add(1)
		resp := &controlapi.RegisterResponse{Challenge: c, ControlKey: s.stamps.pub, Peers: []controlapi.Peer{}}
		if send != nil {
			b, _ := json.Marshal(resp)
			if err := send(b); err != nil {
				return nil, err
			}
		}
		return resp, nil
	}
	resp, err := s.register(ctx, req, send, adm)
	if err != nil {
		s.refused.Add(1)
		s.log.Warn("registration failed", "name", req.Name, "err", err)
		return nil, err
	}
	if adm.refuseNew != nil {
		s.log.Info("known node re-registered on its proof of key alone", "id", resp.NodeID, "name", req.Name, "token", adm.refuseNew)
	}
	return resp, nil
}

// checkProof judges req's proof of key: a stamped proof (stamp.go) or a
// challenge's answer. challenge is true, with a nil error, when control
// answers with a challenge instead: no proof, or a stamp it cannot judge.
// An error refuses the registration.
func (s *Server) checkProof(req *controlapi.RegisterRequest) (challenge bool, err error) {
	now := s.cfg.Now()
	switch {
	case req.Stamp != 0:
		ok, err := s.stamps.judge(req, now)
		return err == nil && !ok, err
	case req.Proof == nil:
		return true, nil
	}
	return false, s.challenges.verify(req, now)
}

// admission is what admit found: the live token's tags, or, for a known
// identity without one, refuseNew: the token's refusal, which register
// gives if the identity is gone by the time it is stored, so a token that
// no longer admits never creates one.
type admission struct {
	tags      []string
	refuseNew error
}

// admit decides whether req may go on to prove its key. A live join token
// admits any identity. Without one (expired, revoked or wrong) only an
// identity already registered under req's key and name is admitted: the
// token is for joining, and a node that joined re-registers on its proof
// of key alone, so an expired token never strands it.
func (s *Server) admit(ctx context.Context, req *controlapi.RegisterRequest) (admission, error) {
	tags, tokenErr := s.tokens.check(req.Token, s.cfg.Now())
	if tokenErr == nil {
		return admission{tags: tags}, nil
	}
	n, err := s.cfg.Store.Get(ctx, nodeID(req.PublicKey))
	switch {
	case err == nil && n.Name == req.Name:
		return admission{refuseNew: tokenErr}, nil
	case err != nil && !errors.Is(err, ErrNotFound):
		return admission{}, fmt.Errorf("look up the registering key: %w", err)
	}
	return admission{}, tokenErr
}

// register stores the node req proved its key for, as adm admitted it
// (see admit), announces it, then answers it through send (if not nil).
func (s *Server) register(ctx context.Context, req *controlapi.RegisterRequest, send func([]byte) error, adm admission) (*controlapi.RegisterResponse, error) {
	id := nodeID(req.PublicKey)
	mu := s.idLock(id)
	mu.Lock()
	defer mu.Unlock()
	secret := randomSecret()
	hash := sha256.Sum256([]byte(secret))
	if req.Stamp != 0 && !s.stamps.take(req.PublicKey, req.Stamp, s.cfg.Now()) {
		return nil, errBadProof("this proof was used already; register again")
	}
	resp := &controlapi.RegisterResponse{
		NodeID:     id,
		ControlKey: s.stamps.pub,
		Relays:     s.cfg.Relays,
		STUN:       s.cfg.STUN,
		NATS:       s.credsFor(id, secret, req.SharedEvents),

		PresenceTTLMillis: s.cfg.PresenceTTL.Milliseconds(),
	}
	var err error
	if s.cfg.RelayToken != nil {
		if resp.RelayToken, err = s.cfg.RelayToken(req.PublicKey, s.cfg.Now()); err != nil {
			return nil, fmt.Errorf("issue relay token: %w", err)
		}
	}
	n, prev, err := s.storeNodeRetry(ctx, req, id, hash[:], adm)
	if err != nil {
		return nil, err
	}
	resp.Address, resp.Epoch = n.Address, n.Epoch
	b, sent, err := s.encodeRegistration(resp, id, s.maxReply())
	if err != nil {
		if _, _, uerr := s.undoStore(ctx, n, prev); uerr != nil {
			s.log.Error("registration not encoded and not undone", "id", id, "err", err, "undo", uerr)
			return nil, fmt.Errorf("answer registration of %s: %w (and undoing it failed: %w)", id, err, uerr)
		}
		return nil, fmt.Errorf("answer registration of %s (not stored): %w", id, err)
	}
	// The event goes out before the answer: once the node has its answer
	// it may act on it (connect, deregister, register again), and what
	// that publishes must come after this event, never before it (a
	// removal overtaken by the late "add" left the node in every peer's
	// list). If the answer then fails, a second event takes it back.
	event := controlapi.PeerAdded
	if prev != nil {
		event = controlapi.PeerUpdated
	}
	s.announceMu.Lock()
	s.markOnline(id)
	s.publishEvent(controlapi.PeerEvent{Type: event, Peer: n.peer()})
	s.announceMu.Unlock()
	// Counted before the answer goes: a node holding its answer finds it
	// in Stats (and in the metrics), and taken back if the answer fails.
	s.registered.Add(1)
	if send != nil {
		err = send(b)
	} else { // HTTP encodes resp itself
		err = json.Unmarshal(b, resp)
	}
	if err != nil {
		s.registered.Add(^uint64(0))
		restored, undone, uerr := s.undoStore(ctx, n, prev)
		// Nothing to take back if another instance rewrote or removed the
		// record since (its events say so), nor if the undo failed.
		if undone {
			s.announceMu.Lock()
			if prev == nil {
				s.markOffline(id)
				s.publishEvent(controlapi.PeerEvent{Type: controlapi.PeerRemoved, Peer: n.peer()})
			} else {
				s.publishEvent(controlapi.PeerEvent{Type: controlapi.PeerUpdated, Peer: restored.peer()})
			}
			s.announceMu.Unlock()
		}
		if uerr != nil {
			s.log.Error("registration not answered and not undone", "id", id, "err", err, "undo", uerr)
			return nil, fmt.Errorf("answer registration of %s: %w (and undoing it failed: %w)", id, err, uerr)
		}
		return nil, fmt.Errorf("answer registration of %s (not stored): %w", id, err)
	}
	s.log.Info("node registered", "id", id, "name", n.Name, "address", n.Address, "event", event, "peers_sent", sent, "more_peers", resp.MorePeers)
	return resp, nil
}

// credsFor are id's NATS credentials: every server URL, and the shared
// event subject when the node reads it.
func (s *Server) credsFor(id, secret string, shared bool) controlapi.NATSCreds {
	c := controlapi.NATSCreds{URL: s.natsURL(), User: id, Password: secret, Inbox: controlapi.InboxPrefix + "." + id}
	if urls := s.natsURLs(); len(urls) > 1 {
		c.URLs = urls
	}
	if shared {
		c.Events = controlapi.SubjectPeerEvents
	}
	return c
}

// firstPageBytes bounds the peers a registration answer carries (about
// 115): a node fetches its whole list by page once its session listens
// (node.join), so a larger first page only made each registration cost
// more as the registry grew (a 64 KiB answer at 465 peers or more, the
// whole registry up to a server's MaxPayload, 1 MiB by default on a
// stock nats-server: 40 reg/s at 10,000 nodes against 300 at 100).
const firstPageBytes = 16 << 10

// encodeRegistration encodes resp with the first page of id's peers that
// fits in limit bytes (and firstPageBytes of peers), from the view;
// MorePeers says the rest must be fetched (Session.Peers); sent is how
// many it carries. The peers, encoded once in the view, are copied into
// resp's encoding as they are, in one buffer sized for the page: going
// through json.Marshal again would re-validate every byte of them.
// resp.Peers is left empty.
func (s *Server) encodeRegistration(resp *controlapi.RegisterResponse, id string, limit int) (b []byte, sent int, err error) {
	resp.Peers, resp.MorePeers = []controlapi.Peer{}, false
	head, err := json.Marshal(resp)
	if err != nil {
		return nil, 0, fmt.Errorf("encode registration: %w", err)
	}
	i := bytes.Index(head, peersField)
	if i < 0 {
		return nil, 0, errors.New("encode registration: no peer list in the answer")
	}
	at := i + len(peersField) - 2 // at the empty list's '['
	budget := min(limit-len(head)-len(morePeersField), firstPageBytes)
	b = make([]byte, 0, len(head)+len(morePeersField)+max(budget, 0))
	b = append(b, head[:at]...)
	b, sent, more, err := s.view.appendPage(b, "", id, budget, s.offline)
	if err != nil {
		return nil, 0, fmt.Errorf("encode registration: %w", err)
	}
	if more {
		// MorePeers is the field right after Peers (api.go), so this is
		// where json.Marshal would have put it.
		resp.MorePeers = true
		b = append(b, morePeersField...)
	}
	b = append(b, head[at+2:]...)
	if len(b) > limit {
		return nil, 0, fmt.Errorf("registration answer is %d bytes, over the %d a NATS message may carry", len(b), limit)
	}
	return b, sent, nil
}

// peersField is how an empty peer list encodes. It occurs once in an
// encoded RegisterResponse: inside a string, its quotes would be escaped.
var peersField = []byte(`"peers":[]`)

// morePeersField is MorePeers set, as it follows the peer list.
const morePeersField = `,"more_peers":true`

// maxReply is the largest answer control sends: NATS refuses a message
// over the server's MaxPayload.
func (s *Server) maxReply() int {
	if mp := s.nc.MaxPayload(); mp > 0 {
		return int(mp)
	}
	return 64 << 10
}

// storeNodeRetry is storeNode, again when another instance changed the
// record between the read and the write (the same key registering on two
// instances at once), and records the result in the view.
func (s *Server) storeNodeRetry(ctx context.Context, req *controlapi.RegisterRequest, id string, hash []byte, adm admission) (n, prev *Node, err error) {
	for try := range 5 {
		n, prev, err = s.storeNode(ctx, req, id, hash, adm, try > 0)
		if !errors.Is(err, ErrConflict) && !errors.Is(err, ErrExists) {
			break
		}
	}
	if err == nil {
		s.view.put(n, n.rev)
	}
	return n, prev, err
}

// storeNode creates or updates id's record for req; prev is the record it
// replaced (nil: it is new), for undo. It creates none if adm.refuseNew is
// not nil, and returns that instead. A live token's tags replace the
// record's; a registration on proof alone keeps them. ask: read the store
// for id even if the view does not know it.
func (s *Server) storeNode(ctx context.Context, req *controlapi.RegisterRequest, id string, hash []byte, adm admission, ask bool) (n, prev *Node, err error) {
	refuseNew := adm.refuseNew
	now := s.cfg.Now()
	// A key the view does not know is new but for one another instance
	// registered within the watch's delay: Create then fails with
	// ErrExists, and storeNodeRetry comes back here with ask set. Skipping
	// the Get spares a new node's registration one store round trip.
	old, err := (*Node)(nil), error(ErrNotFound)
	if ask || refuseNew != nil || s.view.has(id) {
		old, err = s.cfg.Store.Get(ctx, id)
	}
	switch {
	case err == nil:
		if old.Name != req.Name {
			return nil, nil, &controlapi.Error{Code: controlapi.CodeNameTaken, Message: fmt.Sprintf("this key is registered as %q; deregister it to change its name", old.Name)}
		}
		if req.Challenge != nil && bytes.Equal(old.ProofNonce, req.Challenge.Nonce) ||
			req.Stamp != 0 && req.Stamp <= old.ProofStamp {
			return nil, nil, errBadProof("this proof was used already; register again")
		}
		n := *old
		n.SecretHash, n.Registered = hash, now
		if req.Challenge != nil {
			n.ProofNonce = req.Challenge.Nonce
		} else {
			n.ProofStamp = req.Stamp
		}
		n.SharedEvents = req.SharedEvents
		n.Epoch = nextEpoch(old.Epoch, now)
		if refuseNew == nil {
			n.Tags = adm.tags
		}
		if err := s.cfg.Store.Update(ctx, &n); err != nil {
			if errors.Is(err, ErrNotFound) {
				// Deregistered on another instance since the read: the
				// retry registers it anew.
				err = fmt.Errorf("%w (%w)", ErrConflict, err)
			}
			return nil, nil, fmt.Errorf("update %s: %w", id, err)
		}
		return &n, old, nil
	case !errors.Is(err, ErrNotFound):
		return nil, nil, fmt.Errorf("look up %s: %w", id, err)
	case refuseNew != nil:
		return nil, nil, refuseNew
	}
	n = &Node{ID: id, Name: req.Name, PublicKey: req.PublicKey, SecretHash: hash, Registered: now, ProofStamp: req.Stamp,
		Epoch: nextEpoch(0, now), SharedEvents: req.SharedEvents, Tags: adm.tags}
	if req.Challenge != nil {
		n.ProofNonce = req.Challenge.Nonce
	}
	addrs := preferredAddrs
	if s.cfg.addrsFor != nil {
		addrs = s.cfg.addrsFor
	}
	for a := range addrs(req.PublicKey) {
		n.Address = netip.PrefixFrom(a, Overlay.Bits())
		err := s.cfg.Store.Create(ctx, n)
		switch {
		case errors.Is(err, ErrAddressTaken):
			continue
		case errors.Is(err, ErrNameTaken):
			return nil, nil, &controlapi.Error{Code: controlapi.CodeNameTaken, Message: fmt.Sprintf("name %q belongs to another node", req.Name)}
		case errors.Is(err, ErrExists), errors.Is(err, ErrConflict):
			return nil, nil, err
		case err != nil:
			return nil, nil, fmt.Errorf("store %s: %w", id, err)
		}
		return n, nil, nil
	}
	return nil, nil, &controlapi.Error{Code: controlapi.CodeFull, Message: fmt.Sprintf("no free address in %v", Overlay)}
}

// nextEpoch follows prev: the registration time in Unix ms, and always
// more than prev, so it grows even when the clock does not (a re-created
// node starts above any epoch of its earlier life, unless the clock went
// back).
func nextEpoch(prev uint64, now time.Time) uint64 {
	return max(prev+1, uint64(max(now.UnixMilli(), 0)))
}

// undoStore puts the record storeNode wrote, n, back as it was, prev.
// Over n only: a record another instance wrote since is left alone. It
// returns prev as written back (at the revision of that write, for its
// PeerUpdated event: nodes that applied n's would take one at prev's own
// revision for an old event; nil if prev is nil) and whether anything
// was undone: not if another instance rewrote or removed n since.
func (s *Server) undoStore(ctx context.Context, n, prev *Node) (restored *Node, undone bool, err error) {
	if prev == nil {
		err := s.deleteRecord(ctx, n)
		if errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
			return nil, false, nil // rewritten or deleted since: n is gone already
		}
		if err == nil {
			// A newer record the watch brought into the view is kept.
			s.view.removeAt(n.ID, n.rev)
		}
		return nil, err == nil, err
	}
	p := *prev
	p.rev = n.rev
	err = s.cfg.Store.Update(ctx, &p)
	switch {
	case errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound):
		return nil, false, nil // rewritten or deleted since
	case err != nil:
		return nil, false, err
	}
	s.view.put(&p, p.rev)
	return &p, true, nil
}

// deleteRecord deletes n's record: at the revision n was read or written
// at where the store keeps revisions (a record another instance wrote
// since is left, ErrConflict), else whatever record n's ID has.
func (s *Server) deleteRecord(ctx context.Context, n *Node) error {
	if d, ok := s.cfg.Store.(revisionDeleter); ok && n.rev != 0 {
		return d.deleteAt(ctx, n.ID, n.rev)
	}
	return s.cfg.Store.Delete(ctx, n.ID)
}
