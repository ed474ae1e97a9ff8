package controlapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// Dialer adapts a netx.Network to nats.go's CustomDialer.
func Dialer(n netx.Network) nats.CustomDialer { return netDialer{n} }

type netDialer struct{ n netx.Network }

func (d netDialer) Dial(network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.n.Dial(ctx, network, address)
}

// DecodeReply turns a reply body into v or the *Error it carries.
func DecodeReply(b []byte, v any) error {
	var e ErrorReply
	if err := json.Unmarshal(b, &e); err == nil && e.Error != nil {
		return e.Error
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("malformed reply: %w", err)
	}
	return nil
}

// Join is what a node registers with: the join token, its name and its
// WireGuard private key, which never leaves the node; it proves holding
// it (see ProveKey and ProveKeyAt).
type Join struct {
	Token string
	Name  string
	Key   key.Private
	// ControlKey is control's register key (RegisterResponse.ControlKey,
	// or the control URL's ParamControlKey): with it, registration is one
	// request (a stamped proof), else two (a challenge, then its proof).
	// RegisterNATS and RegisterHTTP take it from the URL if it is zero.
	ControlKey key.Public
	// Now stamps the proof; if nil, time.Now.
	Now func() time.Time
	// Connected, if set, is called once a NATS registration's connection
	// to control is up: the registration ends one or two round trips later
	// (a node dials its session's connection meanwhile, see Predialer).
	Connected func()
	// Dialed, if set, is called once a NATS registration's TCP connection
	// is up, before TLS and NATS's own handshake: a registration of one
	// request ends three round trips later, and a node dials its session's
	// connection then. Dialing it at the same moment as the registration's
	// would gain nothing (it waits for the registration's answer anyway)
	// and would leave the order of the two connections' first packets to
	// the scheduler, which a deterministic lab cannot have.
	Dialed func()
}

// dialedHook dials with d and calls f once, after the first dial that
// succeeds.
type dialedHook struct {
	d    nats.CustomDialer
	f    func()
	once sync.Once
}

func (h *dialedHook) Dial(network, address string) (net.Conn, error) {
	c, err := h.d.Dial(network, address)
	if err == nil {
		h.once.Do(h.f)
	}
	return c, err
}

// Exchange sends one registration request and returns the answer.
type Exchange func(ctx context.Context, body []byte) ([]byte, error)

// Register runs a registration over send. With j.ControlKey it sends one
// request with a stamped proof; a control that answers it with a
// challenge (another key, a clock too far off) gets the challenge's
// proof, and one that refuses it (a control without stamped proofs, or
// a stamp at or below the last one it took for this key) gets the two
// requests of a registration without one: the challenge, then its proof.
// RegisterNATS and RegisterHTTP are it over their transports.
func Register(ctx context.Context, j Join, send Exchange) (*RegisterResponse, error) {
	ask := func(req *RegisterRequest) (*RegisterResponse, error) {
		body, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		b, err := send(ctx, body)
		if err != nil {
			return nil, err
		}
		var resp RegisterResponse
		if err := DecodeReply(b, &resp); err != nil {
			return nil, err
		}
		return &resp, nil
	}
	// Connect reads the shared peer events when control offers them.
	req := &RegisterRequest{Token: j.Token, Name: j.Name, PublicKey: j.Key.Public(), SharedEvents: true}
	var first *RegisterResponse
	if !j.ControlKey.IsZero() {
		resp, err := askStamped(j, *req, ask)
		switch {
		case err != nil:
			return nil, err
		case resp != nil && resp.Challenge == nil:
			return resp, nil
		}
		first = resp // a challenge, or nil: not taken
	}
	if first == nil {
		var err error
		if first, err = ask(req); err != nil {
			return nil, err
		}
	}
	if first.Challenge == nil {
		return nil, errors.New("control answered without a challenge: it does not ask for proof of key")
	}
	req.Challenge = first.Challenge
	var err error
	if req.Proof, err = ProveKey(j.Key, first.Challenge, j.Name); err != nil {
		return nil, err
	}
	resp, err := ask(req)
	if err != nil {
		return nil, err
	}
	if resp.Challenge != nil {
		return nil, errors.New("control answered the proof with another challenge")
	}
	return resp, nil
}

// askStamped sends req with a stamped proof keyed to j.ControlKey and
// returns the answer: the registration, or a challenge. It returns nil and
// no error when control did not take the proof (refused as a bad request
// or a bad proof: a control without stamped proofs, a stamp at or below
// the last one it took for this key), and the registration falls back to
// a challenge.
func askStamped(j Join, req RegisterRequest, ask func(*RegisterRequest) (*RegisterResponse, error)) (*RegisterResponse, error) {
	now := j.Now
	if now == nil {
		now = time.Now
	}
	if err := ProveKeyAt(j.Key, j.ControlKey, now(), &req); err != nil {
		// A control key of low order, given by mistake: no stamped
		// proof can be made with it.
		return nil, nil //nolint:nilerr // the caller then registers with a challenge
	}
	resp, err := ask(&req)
	var e *Error
	if errors.As(err, &e) && (e.Code == CodeBadRequest || e.Code == CodeBadProof) {
		return nil, nil
	}
	return resp, err
}

// RegisterNATS registers over NATS at url: it connects as a joining
// client (the join token is its password), answers control's challenge and
// returns the answer. An *Error reports a refusal, with control's reason.
func RegisterNATS(ctx context.Context, n netx.Network, url string, j Join) (*RegisterResponse, error) {
	nc, ep, err := dialJoin(n, url, j.Token, j.Dialed)
	if err != nil {
		return nil, fmt.Errorf("register: %w", err)
	}
	if j.ControlKey.IsZero() {
		j.ControlKey = ep.controlKey
	}
	defer nc.Close()
	if j.Connected != nil {
		j.Connected()
	}
	resp, err := RegisterOver(ctx, nc, j)
	if err != nil {
		return nil, fmt.Errorf("register over NATS: %w", err)
	}
	inheritTrust(ep, &resp.NATS)
	return resp, nil
}

// dialJoin connects to control's NATS at url as a joining client, the
// join token its password.
func dialJoin(n netx.Network, url, token string, dialed func()) (*nats.Conn, *endpoint, error) {
	if len(token) > MaxTokenBytes {
		// NATS would refuse the login, without saying why.
		return nil, nil, &Error{Code: CodeBadRequest, Message: fmt.Sprintf("token is %d bytes, at most %d", len(token), MaxTokenBytes)}
	}
	var rnd [16]byte
	_, _ = rand.Read(rnd[:])
	user := JoinPrefix + fmt.Sprintf("%x", rnd)
	opts := []nats.Option{nats.UserInfo(user, token),
		nats.CustomInboxPrefix(InboxPrefix + "." + user), nats.NoReconnect(), nats.Name("lattice-join")}
	if dialed != nil {
		// After dialNATS's own dialer, so this one is used.
		opts = append(opts, nats.SetCustomDialer(&dialedHook{d: Dialer(n), f: dialed}))
	}
	nc, ep, err := dialNATS(n, url, opts...)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) || strings.Contains(err.Error(), "Authorization") {
			// Control admits every joining client and answers with the
			// reason; a NATS that refuses the login gives none (a control
			// older than that, or a NATS whose operator checks tokens).
			return nil, nil, &Error{Code: CodeBadToken, Message: "NATS refused the joining connection without saying why (a wrong, expired or revoked join token?)"}
		}
		return nil, nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	return nc, ep, nil
}

// Servers asks the control at url (tls://, nats://, https:// or http://,
// as a node's control URL) for the relays and STUN servers it announces,
// with only a join token: nothing is registered. An *Error reports a
// refusal, with control's reason.
func Servers(ctx context.Context, n netx.Network, url, token string) (*ServersResponse, error) {
	body, err := json.Marshal(ServersRequest{Token: token})
	if err != nil {
		return nil, err
	}
	var b []byte
	switch {
	case strings.HasPrefix(url, "nats://"), strings.HasPrefix(url, "tls://"):
		nc, _, err := dialJoin(n, url, token, nil)
		if err != nil {
			return nil, fmt.Errorf("servers: %w", err)
		}
		defer nc.Close()
		m, err := nc.RequestWithContext(ctx, SubjectServers, body)
		if err != nil {
			return nil, fmt.Errorf("servers: ask %s: %w", SubjectServers, err)
		}
		b = m.Data
	case strings.HasPrefix(url, "http://"), strings.HasPrefix(url, "https://"):
		client, ep, err := httpEndpoint(n, url)
		if err != nil {
			return nil, fmt.Errorf("servers over HTTP: %w", err)
		}
		defer client.CloseIdleConnections()
		if b, err = postJSON(ctx, client, ep.plainURL()+"/v1/servers", body); err != nil {
			return nil, fmt.Errorf("servers over HTTP: %w", err)
		}
	default:
		return nil, fmt.Errorf("servers: control URL %q: want tls://, https://, nats:// or http://", url)
	}
	var resp ServersResponse
	if err := DecodeReply(b, &resp); err != nil {
		return nil, fmt.Errorf("servers: %w", err)
	}
	return &resp, nil
}

// inheritTrust gives the advertised NATS URLs the trust registration was
// made with (endpoint.inherit).
func inheritTrust(ep *endpoint, c *NATSCreds) {
	c.URL = ep.inherit(c.URL)
	for i, u := range c.URLs {
		c.URLs[i] = ep.inherit(u)
	}
}

// RegisterOver registers on nc, a connection as a joining client.
func RegisterOver(ctx context.Context, nc *nats.Conn, j Join) (*RegisterResponse, error) {
	return Register(ctx, j, func(ctx context.Context, body []byte) ([]byte, error) {
		m, err := nc.RequestWithContext(ctx, SubjectRegister, body)
		if err != nil {
			return nil, err
		}
		return m.Data, nil
	})
}

// RegisterHTTP registers with POST baseURL/v1/register (once with a
// stamped proof; else twice: the challenge, then the proof).
func RegisterHTTP(ctx context.Context, n netx.Network, baseURL string, j Join) (*RegisterResponse, error) {
	client, ep, err := httpEndpoint(n, baseURL)
	if err != nil {
		return nil, fmt.Errorf("register over HTTP: %w", err)
	}
	defer client.CloseIdleConnections()
	if j.ControlKey.IsZero() {
		j.ControlKey = ep.controlKey
	}
	url := ep.plainURL() + "/v1/register"
	resp, err := Register(ctx, j, func(ctx context.Context, body []byte) ([]byte, error) {
		return postJSON(ctx, client, url, body)
	})
	if err != nil {
		return nil, fmt.Errorf("register over HTTP: %w", err)
	}
	inheritTrust(ep, &resp.NATS)
	return resp, nil
}

// postJSON posts body to url and returns the answer's body, whatever its
// status (an error reply is in the body).
func postJSON(ctx context.Context, client *http.Client, url string, body []byte) ([]byte, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := client.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer hresp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(hresp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read reply (%s): %w", hresp.Status, err)
	}
	return b, nil
}

// Session is a registered node's NATS connection: peer events in, signals
// both ways.
type Session struct {
	id string
	nc *nats.Conn

	onPeer   func(PeerEvent)
	onSignal func(from string, payload []byte)
}

// Handlers receive a session's events. They run on NATS's delivery
// goroutines; any may be nil.
type Handlers struct {
	Peer   func(PeerEvent)
	Signal func(from string, payload []byte)
	// Reconnected runs after the connection to NATS came back: events
	// published meanwhile are lost, so the node should resync its peers.
	Reconnected func()
	// Rejected runs when NATS refuses the session's credentials (control
	// lost its registry, or the node was deregistered): the node should
	// register again.
	Rejected func()
}

// Connect opens a node's session with the credentials registration gave.
// It reconnects by itself, forever, with the same credentials. When it
// returns, NATS has the session's subscriptions.
func Connect(ctx context.Context, n netx.Network, nodeID string, creds NATSCreds, h Handlers) (*Session, error) {
	s, err := dialSession(n, nodeID, creds, h)
	if err != nil {
		return nil, err
	}
	if err := s.flush(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// ConnectPeers is Connect then PeerList, a round trip shorter: NATS handles
// a connection's messages in order, so the answer to the peer list, asked
// right behind the subscriptions, says they are in place as Connect's
// flush does, and every peer event published after control read the list
// reaches the session. If the list fails, the session is flushed instead
// and returned all the same, with the list's error: a caller that can do
// without the list keeps it.
func ConnectPeers(ctx context.Context, n netx.Network, nodeID string, creds NATSCreds, h Handlers) (*Session, *PeerList, error) {
	s, err := dialSession(n, nodeID, creds, h)
	if err != nil {
		return nil, nil, err
	}
	l, listErr := s.PeerList(ctx)
	if listErr == nil {
		return s, &l, nil
	}
	if err := s.flush(ctx); err != nil {
		s.Close()
		return nil, nil, fmt.Errorf("%w (after %w)", err, listErr)
	}
	return s, nil, listErr
}

// dialSession connects and subscribes, without waiting for NATS to
// confirm the subscriptions.
func dialSession(n netx.Network, nodeID string, creds NATSCreds, h Handlers) (*Session, error) {
	s := &Session{id: nodeID, onPeer: h.Peer, onSignal: h.Signal}
	opts := []nats.Option{nats.SetCustomDialer(Dialer(n)), nats.UserInfo(creds.User, creds.Password),
		nats.CustomInboxPrefix(creds.Inbox), nats.Name("lattice-node " + nodeID), nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond), nats.ReconnectJitter(500*time.Millisecond, time.Second),
		// A connection that died silently (a NAT on the way rebooted) is
		// found within a minute, not nats.go's default four.
		nats.PingInterval(20 * time.Second), nats.MaxPingsOutstanding(2)}
	if h.Reconnected != nil {
		opts = append(opts, nats.ReconnectHandler(func(*nats.Conn) { go h.Reconnected() }))
	}
	if h.Rejected != nil {
		var once sync.Once
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrAuthorization) || strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
				once.Do(func() { go h.Rejected() })
			}
		}))
	}
	urls := creds.URLs
	if len(urls) == 0 {
		urls = []string{creds.URL}
	}
	nc, _, err := DialServers(n, urls, true, opts...)
	if err != nil {
		return nil, fmt.Errorf("node %s: connect to %s: %w", nodeID, strings.Join(urls, ","), err)
	}
	s.nc = nc
	if _, err := nc.Subscribe(NodeSubject(nodeID, LeafPeers), s.peerMsg); err != nil {
		nc.Close()
		return nil, fmt.Errorf("node %s: subscribe to peer events: %w", nodeID, err)
	}
	if creds.Events != "" {
		if _, err := nc.Subscribe(creds.Events, s.peerMsg); err != nil {
			nc.Close()
			return nil, fmt.Errorf("node %s: subscribe to shared peer events: %w", nodeID, err)
		}
	}
	if _, err := nc.Subscribe(NodeSubject(nodeID, LeafSignalIn), s.signalMsg); err != nil {
		nc.Close()
		return nil, fmt.Errorf("node %s: subscribe to signals: %w", nodeID, err)
	}
	return s, nil
}

// flush waits (up to 10 s) for NATS to confirm what the session sent.
func (s *Session) flush(ctx context.Context) error {
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.nc.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("node %s: %w", s.id, err)
	}
	return nil
}

// peerMsg delivers a peer event, from the node's own subject or the
// shared one; the shared one carries the node's own changes too, which
// are no peer's.
func (s *Session) peerMsg(m *nats.Msg) {
	var ev PeerEvent
	if json.Unmarshal(m.Data, &ev) != nil || s.onPeer == nil || ev.Peer.NodeID == s.id {
		return
	}
	s.onPeer(ev)
}

func (s *Session) signalMsg(m *nats.Msg) {
	if s.onSignal != nil && len(m.Data) <= MaxSignalBytes {
		s.onSignal(m.Header.Get(HeaderFrom), m.Data)
	}
}

// Probe checks that NATS still answers: it sends a PING and waits up to
// timeout for the PONG. A connection that stays silent is dropped and
// the client reconnects at once (with the same credentials), where its
// own pings would notice only after minutes. This is for when the caller
// has reason to doubt the path, such as its direct paths going silent
// together: a NAT on the way may have rebooted and forgotten the
// connection. A session that is reconnecting already is left alone.
func (s *Session) Probe(ctx context.Context, timeout time.Duration) error {
	if !s.nc.IsConnected() {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := s.nc.FlushWithContext(pctx)
	if err == nil || ctx.Err() != nil || !s.nc.IsConnected() {
		return ctx.Err()
	}
	if rerr := s.nc.ForceReconnect(); rerr != nil {
		return fmt.Errorf("control session: no answer within %v (%w), and reconnecting failed: %w", timeout, err, rerr)
	}
	return fmt.Errorf("control session: no answer within %v, reconnecting: %w", timeout, err)
}

// Conn exposes the NATS connection (tests use it to probe permissions).
func (s *Session) Conn() *nats.Conn { return s.nc }

// Signal sends payload to node to through control and waits for control
// to accept it.
func (s *Session) Signal(ctx context.Context, to string, payload []byte) error {
	m := nats.NewMsg(NodeSubject(s.id, LeafSignalOut))
	m.Header.Set(HeaderTo, to)
	m.Data = payload
	r, err := s.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return fmt.Errorf("signal %s: %w", to, err)
	}
	var ok struct{}
	if err := DecodeReply(r.Data, &ok); err != nil {
		return fmt.Errorf("signal %s: %w", to, err)
	}
	return nil
}

// Peers asks control for the current peer list, page by page.
func (s *Session) Peers(ctx context.Context) ([]Peer, error) {
	l, err := s.PeerList(ctx)
	return l.Peers, err
}

// PeerList asks control for the current peer list, page by page, with
// the registry revision it holds every change up to.
func (s *Session) PeerList(ctx context.Context) (PeerList, error) {
	all := PeerList{Peers: []Peer{}}
	var req PeerListRequest
	mixed := false // pages of two registries: the list's revision is unknown
	for first := true; ; first = false {
		body, _ := json.Marshal(req)
		r, err := s.nc.RequestWithContext(ctx, NodeSubject(s.id, LeafPeerList), body)
		if err != nil {
			return PeerList{}, fmt.Errorf("peer list: %w", err)
		}
		var page PeerPage
		if err := DecodeReply(r.Data, &page); err != nil {
			return PeerList{}, fmt.Errorf("peer list: %w", err)
		}
		all.Peers = append(all.Peers, page.Peers...)
		switch {
		case first:
			all.Rev, all.Reg = page.Rev, page.Reg
		case page.Reg != all.Reg:
			all.Rev, all.Reg, mixed = 0, 0, true
		case !mixed && page.Rev < all.Rev:
			all.Rev = page.Rev
		}
		if !page.More {
			return all, nil
		}
		if len(page.Peers) == 0 {
			return PeerList{}, errors.New("peer list: control announced more peers but sent an empty page")
		}
		req.After = page.Peers[len(page.Peers)-1].NodeID
	}
}

// Deregister leaves the network: the address is released and peers are
// told. The session stays open until Close.
func (s *Session) Deregister(ctx context.Context) error {
	r, err := s.nc.RequestWithContext(ctx, NodeSubject(s.id, LeafDeregister), nil)
	if err != nil {
		return fmt.Errorf("deregister: %w", err)
	}
	var ok struct{}
	return DecodeReply(r.Data, &ok)
}

// Presence tells control the node is running (online: a heartbeat) or
// is stopping (a goodbye): peers are told at once that it is offline, its
// identity and address stay registered. epoch is the node's registration
// (RegisterResponse.Epoch; 0 for none): control ignores a goodbye or
// heartbeat from a registration older than the node's latest. See
// control's presence.go.
func (s *Session) Presence(ctx context.Context, online bool, epoch uint64) error {
	body, _ := json.Marshal(PresenceRequest{Online: online, Epoch: epoch})
	r, err := s.nc.RequestWithContext(ctx, NodeSubject(s.id, LeafPresence), body)
	if err != nil {
		return fmt.Errorf("presence: %w", err)
	}
	var ok struct{}
	if err := DecodeReply(r.Data, &ok); err != nil {
		return fmt.Errorf("presence: %w", err)
	}
	return nil
}

// Close closes the session.
func (s *Session) Close() { s.nc.Close() }

// RelayToken asks control for a fresh relay token for this node's key
// (LeafRelayToken). A node calls it before its token expires, and at once
// when a relay says it has.
func (s *Session) RelayToken(ctx context.Context) (string, error) {
	r, err := s.nc.RequestWithContext(ctx, NodeSubject(s.id, LeafRelayToken), nil)
	if err != nil {
		return "", fmt.Errorf("relay token: %w", err)
	}
	var resp RelayTokenResponse
	if err := DecodeReply(r.Data, &resp); err != nil {
		return "", fmt.Errorf("relay token: %w", err)
	}
	if resp.Token == "" {
		return "", errors.New("relay token: control answered with an empty token")
	}
	return resp.Token, nil
}
