package control

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// Config configures a control Server. Tokens and Store are required.
type Config struct {
	// Network to listen and dial on. If nil, netx.OS.
	Network netx.Network
	// Logger. If nil, logs are discarded.
	Logger *slog.Logger
	// Now is the clock for token expiry. If nil, time.Now.
	Now func() time.Time

	// Tokens admit nodes; at least one, each 16+ characters.
	Tokens []JoinToken
	// Store keeps the registry. If nil, KVBucket must name a JetStream
	// key-value bucket on control's NATS, which is then the store (the
	// embedded server needs a StoreDir for that).
	Store    Store
	KVBucket string
	// KVReplicas is the KVBucket's replica count. If zero, 3 when
	// control's NATS is a cluster, else 1.
	KVReplicas int

	// EmbeddedNATS starts a NATS server in-process. If nil, control
	// connects to NATSURL as NATSUser/NATSPassword, and the NATS
	// operator enforces node permissions (see docs).
	EmbeddedNATS *EmbeddedNATSConfig
	NATSURL      string
	NATSUser     string
	NATSPassword string
	// AuthCallout makes control the external NATS's auth callout, which
	// enforces every node's permissions there (callout.go). If nil, the
	// NATS operator must.
	AuthCallout *AuthCallout
	// AdvertiseNATS is the NATS URL given to nodes. If empty, the
	// embedded server's URL or NATSURL.
	AdvertiseNATS string

	// HTTPListen serves POST /v1/register there. If empty, no HTTP.
	HTTPListen string
	// TLS is the certificate HTTP registration and the embedded NATS
	// listener present (see tls.go: LoadTLS, SelfSignedTLS). If nil, both
	// are plaintext, which clients accept on loopback only.
	TLS *tls.Config

	// Relays, STUN: what nodes are told to use.
	Relays []controlapi.Relay
	STUN   []string
	// RelayToken issues a node's relay token. If nil, nodes get none.
	RelayToken func(pub key.Public, now time.Time) (string, error)

	// PresenceTTL is how long a node stays online without a heartbeat
	// (see presence.go). If zero, DefaultPresenceTTL (15s).
	PresenceTTL time.Duration

	// addrsFor replaces preferredAddrs in tests that make every key
	// contend for the same addresses.
	addrsFor func(key.Public) func(yield func(netip.Addr) bool)
	// watchHook, if not nil, runs before the view applies each entry of
	// the registry's watch (tests make the watch lag with it).
	watchHook func(id string, rev uint64)
	// barrierWait bounds the read barrier (barrier.go). If zero, 2s.
	barrierWait time.Duration
	// noBarrier turns the read barrier off (benchmarks compare).
	noBarrier bool
	// barrierReadHook, if not nil, runs before each read of the read
	// barrier (tests make the read as slow as a distant JetStream's).
	barrierReadHook func()
	// deregisterHook, if not nil, runs between a deregistration's read
	// of the record and its delete (tests write the record meanwhile).
	deregisterHook func(id string)
}

// Stats counts what a Server did.
type Stats struct {
	Registered, Refused, Deregistered uint64
	// Challenged counts registrations answered with a challenge: a node
	// without control's register key (or with a stale one) registers in
	// two requests instead of one.
	Challenged                     uint64
	SignalsRelayed, SignalsDropped uint64
	// BadReplies counts requests refused for a reply subject outside the
	// requester's inbox.
	BadReplies uint64
	// PeerEvents counts the peer events this instance published, by type
	// (PeerEventTypes).
	PeerEvents map[controlapi.PeerEventType]uint64
}

// PeerEventTypes are the types of peer events, in the order the metrics
// list them.
var PeerEventTypes = [...]controlapi.PeerEventType{controlapi.PeerAdded, controlapi.PeerUpdated, controlapi.PeerRemoved, controlapi.PeerOffline, controlapi.PeerOnline}

// Server is the control service.
type Server struct {
	cfg    Config
	log    *slog.Logger
	tokens tokenSet

	nats    *EmbeddedNATS
	auth    *authenticator // who may log in, with which permissions
	callout *callout       // nil: not serving an auth callout
	nc      *nats.Conn
	http    *http.Server
	httpLn  net.Listener
	wg      sync.WaitGroup

	// idLocks serialize registrations and deregistrations of one key in
	// this instance (a node retrying while its first attempt is in
	// flight, or deregistering while its next life registers); different
	// keys register in parallel, on registerWorkers subscriptions.
	idLocks [64]sync.Mutex

	view      *view           // the registry, in memory (view.go)
	barrier   *readBarrier    // the view caught up before it is read (barrier.go); nil: none
	regOf     func() uint64   // the shared registry's Reg (controlapi.Peer.Reg), set before the watch starts; nil: none
	watchDone <-chan struct{} // closed when the view's watch ended; nil: none
	// challengeSecret derives registration challenges' keys (proof.go);
	// shared through the Store by every instance that shares it.
	challengeSecret []byte
	challenges      *challenger // issues and verifies with challengeSecret
	stamps          *stamper    // verifies stamped proofs with a key derived from it

	// announceMu orders presence changes with their announcements: a
	// change of a node's presence and the peer event saying so are made
	// under it, so this instance announces a node's changes in the order
	// they happened (an expiry announced after the heartbeat that ended
	// it left peers showing a running node offline). Taken before presMu
	// and view.mu, never under them.
	announceMu sync.Mutex
	presMu     sync.Mutex           // guards seen
	seen       map[string]time.Time // online node ID → its last sign of life
	stop       context.CancelFunc   // ends presenceLoop

	registered, refused, deregistered, challenged, relayed, dropped, badReplies atomic.Uint64
	events                                                                      [len(PeerEventTypes)]atomic.Uint64 // published, by PeerEventTypes' index
}

// New validates cfg and starts the server: NATS (embedded or external),
// its subscriptions, and HTTP if configured. Close stops everything.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Network == nil {
		cfg.Network = netx.OS
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case cfg.PresenceTTL == 0:
		cfg.PresenceTTL = DefaultPresenceTTL
	case cfg.PresenceTTL < 0:
		return nil, fmt.Errorf("control: PresenceTTL %v is negative", cfg.PresenceTTL)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.Store == nil && cfg.KVBucket == "":
		return nil, errors.New("control: no Store and no KVBucket")
	case cfg.Store != nil && cfg.KVBucket != "":
		return nil, errors.New("control: both Store and KVBucket set; choose one")
	case cfg.KVBucket != "" && cfg.EmbeddedNATS != nil && cfg.EmbeddedNATS.StoreDir == "":
		return nil, errors.New("control: KVBucket with embedded NATS needs EmbeddedNATS.StoreDir for JetStream")
	case cfg.AuthCallout != nil && cfg.EmbeddedNATS != nil:
		return nil, errors.New("control: AuthCallout is for an external NATS; the embedded one checks logins itself")
	}
	s := &Server{cfg: cfg, log: log, tokens: tokenSet(cfg.Tokens), seen: map[string]time.Time{}, stop: func() {}, view: newView()}
	if err := s.tokens.validate(); err != nil {
		return nil, err
	}
	s.auth = &authenticator{secrets: s.secretHash}
	if cfg.AuthCallout != nil {
		co, err := newCallout(cfg.AuthCallout)
		if err != nil {
			return nil, err
		}
		s.callout = co
	}
	if err := s.connectNATS(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if cfg.KVBucket != "" {
		kv, err := OpenKVStore(ctx, s.nc, KVOptions{Bucket: cfg.KVBucket, Replicas: cfg.KVReplicas})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("control: %w", err)
		}
		s.cfg.Store = kv
	}
	pctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	if err := s.loadView(ctx, pctx); err != nil {
		s.Close()
		return nil, err
	}
	var err error
	if s.challengeSecret, err = controlSecret(ctx, s.cfg.Store); err != nil {
		s.Close()
		return nil, err
	}
	s.challenges = newChallenger(s.challengeSecret)
	if s.stamps, err = newStamper(s.challengeSecret); err != nil {
		s.Close()
		return nil, err
	}
	// Nodes that were running before control (re)started are presumed
	// online for one PresenceTTL, in which their heartbeats resume: a
	// restart of control must not take the whole mesh offline.
	now := cfg.Now()
	s.view.mu.Lock()
	ids := slices.Clone(s.view.ids)
	s.view.mu.Unlock()
	s.presMu.Lock()
	for _, id := range ids {
		s.seen[id] = now
	}
	s.presMu.Unlock()
	nodes := len(ids)
	if err := s.subscribe(); err != nil {
		s.Close()
		return nil, err
	}
	if s.callout != nil {
		if err := s.serveCallout(); err != nil {
			s.Close()
			return nil, err
		}
	}
	s.wg.Go(func() { s.presenceLoop(pctx) })
	if cfg.HTTPListen != "" {
		if err := s.serveHTTP(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	log.Info("control started", "nodes", nodes, "nats", s.natsURL())
	return s, nil
}

func (s *Server) connectNATS(ctx context.Context) error {
	opts := []nats.Option{nats.Name("lattice-control"), nats.MaxReconnects(-1)}
	if s.cfg.EmbeddedNATS != nil {
		pass := randomSecret()
		s.auth.controlPass = pass
		e, err := startEmbeddedNATS(ctx, s.embeddedNATSConfig(), s.auth)
		if err != nil {
			return err
		}
		s.nats = e
		opts = append(opts, nats.InProcessServer(e.Server()), nats.UserInfo(controlUser, pass))
		nc, err := nats.Connect("", opts...)
		if err != nil {
			return fmt.Errorf("control: connect to embedded NATS: %w", err)
		}
		s.nc = nc
		return nil
	}
	if s.cfg.NATSURL == "" {
		return errors.New("control: neither EmbeddedNATS nor NATSURL set")
	}
	// An external NATS is checked as a node checks control: plaintext only
	// to loopback (or with insecure=1), tls:// with the system roots or a
	// pinned fingerprint. Unlike control's own listener, a stock
	// nats-server upgrades to TLS after its INFO, so no handshake first.
	// NATSURL may list every server of a cluster.
	opts = append(opts, nats.UserInfo(s.cfg.NATSUser, s.cfg.NATSPassword))
	nc, urls, err := controlapi.DialServers(s.cfg.Network, controlapi.SplitURLs(s.cfg.NATSURL), false, opts...)
	if err != nil {
		if urls == nil {
			return fmt.Errorf("control: NATS URL (control's NATS password would cross it): %w", err)
		}
		return fmt.Errorf("control: connect to NATS %s: %w", strings.Join(urls, ","), err)
	}
	s.nc = nc
	return nil
}

// Conn is control's own NATS connection (e.g. for a JetStream KV store).
func (s *Server) Conn() *nats.Conn { return s.nc }

// NATS is the embedded server, nil when control uses an external one.
func (s *Server) NATS() *EmbeddedNATS { return s.nats }

// HTTPAddr is where HTTP registration listens, nil without HTTP.
func (s *Server) HTTPAddr() net.Addr {
	if s.httpLn == nil {
		return nil
	}
	return s.httpLn.Addr()
}

// natsURL is the first of natsURLs.
func (s *Server) natsURL() string {
	if u := s.natsURLs(); len(u) > 0 {
		return u[0]
	}
	return ""
}

// secretHash is id's password hash from the registry, nil if id is not
// registered (or the registry cannot say). It reads the Store every time,
// so every control instance sharing a registry accepts the nodes any of
// them registered, and none accepts one deregistered anywhere.
func (s *Server) secretHash(id string) []byte {
	n, err := s.lookup(id)
	if err != nil || n == nil {
		return nil
	}
	return n.SecretHash
}

// unregistered is the error a request about id gets if id is not in the
// registry (not found), or if the registry cannot say (its failure, not
// "not found": a node told so registers again); nil if id is there.
func (s *Server) unregistered(id string) *controlapi.Error {
	n, err := s.lookup(id)
	switch {
	case err != nil:
		return asError(err)
	case n == nil:
		return &controlapi.Error{Code: controlapi.CodeNotFound, Message: fmt.Sprintf("no node %q", truncate(id, 40))}
	}
	return nil
}

// lookup reads id's record from the Store: nil and no error if there is
// none.
func (s *Server) lookup(id string) (*Node, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := s.cfg.Store.Get(ctx, id)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, ErrNotFound):
		return nil, nil
	default:
		s.log.Warn("registry lookup", "id", truncate(id, 40), "err", err)
		return nil, fmt.Errorf("registry lookup: %w", err)
	}
}

// registerWorkers is how many registrations one instance handles at once.
const registerWorkers = 16

// peerListWorkers is how many peer list requests one instance handles at
// once.
const peerListWorkers = 16

func (s *Server) subscribe() error {
	const queue = "lattice-control"
	// nats.go runs one subscription's handler for one message at a time;
	// more subscriptions in the queue group take registrations in
	// parallel (the store's round trips dominate them), and peer lists,
	// which wait for the view to catch up (barrier.go), while requests
	// waiting together share one read of the registry's revision.
	subs := []struct {
		subject string
		h       nats.MsgHandler
		workers int
	}{
		{controlapi.SubjectRegister, s.onRegister, registerWorkers},
		{controlapi.SubjectServers, s.onServers, 1},
		{subjectNodes + "*." + controlapi.LeafSignalOut, s.onSignal, 1},
		{subjectNodes + "*." + controlapi.LeafPeerList, s.onPeerList, peerListWorkers},
		{subjectNodes + "*." + controlapi.LeafDeregister, s.onDeregister, 1},
		{subjectNodes + "*." + controlapi.LeafRelayToken, s.onRelayToken, 1},
	}
	for _, sub := range subs {
		for range sub.workers {
			if _, err := s.nc.QueueSubscribe(sub.subject, queue, sub.h); err != nil {
				return fmt.Errorf("control: subscribe %s: %w", sub.subject, err)
			}
		}
	}
	// Every instance hears every heartbeat (no queue group), so all agree
	// on presence; the requester takes the first reply.
	if _, err := s.nc.Subscribe(subjectNodes+"*."+controlapi.LeafPresence, s.onPresence); err != nil {
		return fmt.Errorf("control: subscribe %s: %w", controlapi.LeafPresence, err)
	}
	return s.nc.Flush()
}

// nodeOf extracts the node ID from lattice.v1.node.<id>.<leaf…>.
func nodeOf(subject string) string {
	id, _, _ := strings.Cut(strings.TrimPrefix(subject, subjectNodes), ".")
	return id
}

func asError(err error) *controlapi.Error {
	var e *controlapi.Error
	if errors.As(err, &e) {
		return e
	}
	return &controlapi.Error{Code: controlapi.CodeInternal, Message: err.Error()}
}

func (s *Server) onSignal(m *nats.Msg) {
	if !s.replyAllowed(m) {
		return
	}
	from := nodeOf(m.Subject)
	to := m.Header.Get(controlapi.HeaderTo)
	switch {
	case len(m.Data) > controlapi.MaxSignalBytes:
		s.dropped.Add(1)
		s.reply(m, controlapi.ErrorReply{Error: &controlapi.Error{Code: controlapi.CodeBadRequest, Message: fmt.Sprintf("signal is %d bytes, at most %d", len(m.Data), controlapi.MaxSignalBytes)}})
		return
	}
	if e := s.unregistered(to); e != nil {
		s.dropped.Add(1)
		s.reply(m, controlapi.ErrorReply{Error: e})
		return
	}
	out := nats.NewMsg(controlapi.NodeSubject(to, controlapi.LeafSignalIn))
	out.Header.Set(controlapi.HeaderFrom, from)
	out.Data = m.Data
	if err := s.nc.PublishMsg(out); err != nil {
		s.dropped.Add(1)
		s.reply(m, controlapi.ErrorReply{Error: asError(err)})
		return
	}
	s.relayed.Add(1)
	s.reply(m, struct{}{})
}

// idLock is the lock of id's registrations (idLocks).
func (s *Server) idLock(id string) *sync.Mutex {
	if id == "" {
		return &s.idLocks[0]
	}
	return &s.idLocks[id[len(id)-1]%byte(len(s.idLocks))]
}

func (s *Server) onDeregister(m *nats.Msg) {
	if !s.replyAllowed(m) {
		return
	}
	id := nodeOf(m.Subject)
	ctx := context.Background()
	// Under id's lock: a registration of the same key read between this
	// read and delete failed, or put the deleted node back in the view.
	mu := s.idLock(id)
	mu.Lock()
	defer mu.Unlock()
	var n *Node
	var err error
	for range 5 { // again when another instance wrote the record meanwhile
		if n, err = s.cfg.Store.Get(ctx, id); err == nil {
			if s.cfg.deregisterHook != nil {
				s.cfg.deregisterHook(id)
			}
			// The record read: its removal event names it, and a newer
			// one written since is read again, not deleted unseen.
			err = s.deleteRecord(ctx, n)
		}
		if !errors.Is(err, ErrConflict) {
			break
		}
	}
	if err != nil {
		s.reply(m, controlapi.ErrorReply{Error: asError(err)})
		return
	}
	// A newer record the watch brought into the view meanwhile is kept.
	s.view.removeAt(id, n.rev)
	s.announceMu.Lock()
	s.markOffline(id)
	s.publishEvent(controlapi.PeerEvent{Type: controlapi.PeerRemoved, Peer: n.peer()})
	s.announceMu.Unlock()
	s.deregistered.Add(1)
	s.log.Info("node deregistered", "id", id, "name", n.Name)
	s.reply(m, struct{}{})
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{
		Registered: s.registered.Load(), Refused: s.refused.Load(), Deregistered: s.deregistered.Load(), Challenged: s.challenged.Load(),
		SignalsRelayed: s.relayed.Load(), SignalsDropped: s.dropped.Load(), BadReplies: s.badReplies.Load(),
		PeerEvents: s.peerEventCounts(),
	}
}

func (s *Server) peerEventCounts() map[controlapi.PeerEventType]uint64 {
	out := make(map[controlapi.PeerEventType]uint64, len(PeerEventTypes))
	for i, t := range PeerEventTypes {
		out[t] = s.events[i].Load()
	}
	return out
}

// Store is the registry in use.
func (s *Server) Store() Store { return s.cfg.Store }

// RegisterKey is control's register key: given to nodes in their control
// URL (controlapi.ParamControlKey), it makes their first registration one
// request (stamp.go). Every instance sharing the registry has the same.
func (s *Server) RegisterKey() key.Public { return s.stamps.pub }

// Close stops HTTP and NATS; it does not close a Store given in Config.
func (s *Server) Close() error {
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.http.Shutdown(ctx)
		cancel()
	}
	s.stop()
	s.wg.Wait()
	if s.watchDone != nil {
		<-s.watchDone
	}
	if s.nc != nil {
		s.nc.Close()
	}
	if s.nats != nil {
		return s.nats.Close()
	}
	return nil
}

func randomSecret() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error()) // cannot happen on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}
