// Package control is Lattice's control plane: nodes register with a join
// token and their WireGuard public key, get an overlay address in
// 100.64.0.0/10, the relay and STUN endpoints and their peers, and from then
// on receive peer updates and relay ICE signaling to each other over NATS.
//
// Registration is a NATS request on SubjectRegister, or POST /v1/register
// over HTTP; both give the same answer. Every node then connects to NATS as
// its own user, which may only publish and subscribe under its own subject
// (NodeSubject) and inbox: one node cannot read another's peer updates or
// signaling. Signaling payloads are sealed by the nodes; control routes them
// by the sender's identity, which the NATS permissions guarantee, and never
// reads them.
//
// The registry lives in a Store: a JSON file for a single control instance,
// or a NATS JetStream key-value bucket, which lets several stateless
// instances share it.
package control

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"time"

	"github.com/latticelab/lattice/key"
)

// Subjects. The version is part of every subject so that a later protocol
// can run beside this one.
const (
	SubjectRegister = "lattice.v1.register"
	// SubjectServers is a joining client's request for the relays and
	// STUN servers control announces (servers.go).
	SubjectServers = "lattice.v1.servers"
	subjectNodes   = "lattice.v1.node."
	// SubjectPeerEvents carries every PeerEvent once, to every node that
	// registered with SharedEvents: one change is one message, however
	// many nodes there are. Nodes may only subscribe to it.
	SubjectPeerEvents = "lattice.v1.peers"
	// InboxPrefix is where a node's NATS replies arrive: the node sets its
	// connection's inbox prefix to InboxPrefix + "." + its NATS user.
	InboxPrefix = "_INBOX"
)

// Node subjects, below NodeSubject(id, ...).
const (
	LeafPeers      = "peers"       // control → node: PeerEvent
	LeafSignalIn   = "signal.in"   // control → node: a peer's signal, header HeaderFrom
	LeafSignalOut  = "signal.out"  // node → control: a signal for HeaderTo
	LeafPeerList   = "peers.get"   // node → control, request: the current peer list
	LeafDeregister = "deregister"  // node → control, request: leave the network
	LeafPresence   = "presence"    // node → control, request: PresenceRequest (heartbeat or goodbye)
	LeafRelayToken = "relay.token" // node → control, request: a fresh RelayTokenResponse
)

// Signaling headers.
const (
	HeaderTo   = "Lattice-To"
	HeaderFrom = "Lattice-From"
)

// NodeSubject returns a node's subject for leaf.
func NodeSubject(nodeID, leaf string) string { return subjectNodes + nodeID + "." + leaf }

// Limits on what a registration may carry.
const (
	MaxRequestBytes = 16 << 10
	MaxTokenBytes   = 512
	MaxSignalBytes  = 16 << 10
)

// RegisterRequest is what a node sends to join. The first request has no
// Challenge and no Proof and is answered with a challenge only; the second
// carries that Challenge back and the Proof that the node holds the
// private key of PublicKey (see proof.go and ProveKey).
type RegisterRequest struct {
	Token     string     `json:"token"`
	Name      string     `json:"name"`
	PublicKey key.Public `json:"public_key"`
	Challenge *Challenge `json:"challenge,omitempty"`
	Proof     []byte     `json:"proof,omitempty"`
	// SharedEvents: the node takes peer events from SubjectPeerEvents
	// (NATSCreds.Events), so control sends it none of its own. A node
	// without it gets each event on its LeafPeers subject, as before.
	SharedEvents bool `json:"shared_events,omitempty"`
}

// RegisterResponse is what a node gets back. An answer to a request
// without a proof carries only Challenge.
type RegisterResponse struct {
	Challenge *Challenge `json:"challenge,omitempty"`

	NodeID string `json:"node_id"`
	// Address is the node's overlay address with the overlay's prefix
	// length, e.g. 100.64.12.34/10.
	Address    netip.Prefix `json:"address"`
	Relays     []Relay      `json:"relays,omitempty"`
	RelayToken string       `json:"relay_token,omitempty"`
	STUN       []string     `json:"stun,omitempty"`
	Peers      []Peer       `json:"peers"`
	// MorePeers: Peers is the first page of the peer list only (the whole
	// would not fit a NATS message); Session.Peers fetches all of it.
	MorePeers bool      `json:"more_peers,omitempty"`
	NATS      NATSCreds `json:"nats"`
	// Epoch is this registration's epoch (see Peer.Epoch).
	Epoch uint64 `json:"epoch,omitempty"`
	// PresenceTTLMillis is how long control keeps the node online without
	// a heartbeat; the node sends one every third of it. Zero: control
	// tracks no presence.
	PresenceTTLMillis int64 `json:"presence_ttl_ms,omitempty"`
}

// Relay is an LRP relay a node may use.
type Relay struct {
	Addr string `json:"addr"`
	// Fingerprint pins a self-signed relay certificate (hex SHA-256 of
	// the DER), empty when the certificate chains to a trusted root.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// NATSCreds are the node's own NATS credentials.
type NATSCreds struct {
	URL      string `json:"url,omitempty"`
	User     string `json:"user"`
	Password string `json:"password"`
	// Inbox is the inbox prefix the node must use for requests.
	Inbox string `json:"inbox"`
	// URLs are every NATS server of the cluster, URL among them; the node
	// connects to any and reconnects to another when one goes away.
	// Empty: URL alone.
	URLs []string `json:"urls,omitempty"`
	// Events is the subject of the shared peer events
	// (SubjectPeerEvents), given to a node that asked for SharedEvents
	// by a control that sends them. Empty: events come on LeafPeers only.
	Events string `json:"events,omitempty"`
}

// Peer is another node, as a node sees it.
type Peer struct {
	NodeID    string       `json:"node_id"`
	Name      string       `json:"name"`
	PublicKey key.Public   `json:"public_key"`
	Address   netip.Prefix `json:"address"`
	// Offline: the node is registered but not running (it left, or its
	// heartbeats stopped). Its identity and address stay its own.
	Offline bool `json:"offline,omitempty"`
	// Epoch grows with each registration of the node (a restart is one).
	// Signals name the receiver's epoch, so one sealed for an earlier
	// registration is refused after a restart.
	Epoch uint64 `json:"epoch,omitempty"`
	// Tags are the tags of the join token the node last registered with
	// (JoinToken.Tags): an operator's, never the node's own claim.
	Tags []string `json:"tags,omitempty"`
}

// Equal reports whether p and q describe the peer alike.
func (p Peer) Equal(q Peer) bool {
	return p.NodeID == q.NodeID && p.Name == q.Name && p.PublicKey == q.PublicKey && p.Address == q.Address &&
		p.Offline == q.Offline && p.Epoch == q.Epoch && slices.Equal(p.Tags, q.Tags)
}

// HasTag reports whether the peer carries tag.
func (p Peer) HasTag(tag string) bool { return slices.Contains(p.Tags, tag) }

// PeerEventType says what happened to a peer.
type PeerEventType string

// Peer event types.
const (
	PeerAdded   PeerEventType = "add"
	PeerUpdated PeerEventType = "update"
	PeerRemoved PeerEventType = "remove"
	// PeerOffline and PeerOnline: the peer stopped or came back; it stays
	// registered (see presence.go).
	PeerOffline PeerEventType = "offline"
	PeerOnline  PeerEventType = "online"
)

// PeerEvent is pushed on a node's LeafPeers subject.
type PeerEvent struct {
	Type PeerEventType `json:"type"`
	Peer Peer          `json:"peer"`
}

// Error is the body of a refused request, over NATS and HTTP alike.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Error codes.
const (
	CodeBadRequest = "bad_request"
	CodeBadToken   = "bad_token"
	CodeBadProof   = "bad_proof"
	CodeNameTaken  = "name_taken"
	CodeFull       = "address_pool_exhausted"
	CodeInternal   = "internal"
	CodeNotFound   = "not_found"
)

// errorReply wraps an Error for the wire: {"error": {...}}.
type errorReply struct {
	Error *Error `json:"error"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidName reports whether s is a valid node name or tag: 1-63 lowercase
// letters, digits and inner hyphens.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Validate checks a request's fields, naming the first bad one.
func (r *RegisterRequest) Validate() error {
	switch {
	case r.Token == "":
		return &Error{Code: CodeBadToken, Message: "no join token"}
	case len(r.Token) > MaxTokenBytes:
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("token is %d bytes, at most %d", len(r.Token), MaxTokenBytes)}
	case r.Name == "":
		return &Error{Code: CodeBadRequest, Message: "name is empty"}
	case !nameRE.MatchString(r.Name):
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("name %q: use 1-63 lowercase letters, digits and inner hyphens", truncate(r.Name, 80))}
	case r.PublicKey.IsZero():
		return &Error{Code: CodeBadRequest, Message: "public key is missing or all zeros"}
	case (r.Challenge == nil) != (r.Proof == nil):
		return &Error{Code: CodeBadRequest, Message: "challenge and proof come together or not at all"}
	case len(r.Proof) > 64:
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("proof is %d bytes, at most 64", len(r.Proof))}
	case r.Challenge != nil && len(r.Challenge.Nonce) > 64:
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("challenge nonce is %d bytes, at most 64", len(r.Challenge.Nonce))}
	}
	return nil
}

// decodeRequest parses a registration body strictly.
func decodeRequest(b []byte) (*RegisterRequest, error) {
	if len(b) > MaxRequestBytes {
		return nil, &Error{Code: CodeBadRequest, Message: fmt.Sprintf("request is %d bytes, at most %d", len(b), MaxRequestBytes)}
	}
	var r RegisterRequest
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, &Error{Code: CodeBadRequest, Message: "malformed request: " + err.Error()}
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Node is a registered node as the registry stores it.
type Node struct {
	ID        string       `json:"id"`
	Name      string       `json:"name"`
	PublicKey key.Public   `json:"public_key"`
	Address   netip.Prefix `json:"address"`
	// SecretHash is the SHA-256 of the node's NATS password. Every
	// control instance sharing the registry checks passwords against it.
	// No salt: the password is 256 random bits, so there is no dictionary
	// to precompute.
	SecretHash []byte    `json:"secret_hash"`
	Registered time.Time `json:"registered"`
	// ProofNonce is the nonce of the challenge the last registration
	// answered: the same proof is never accepted twice.
	ProofNonce []byte `json:"proof_nonce,omitempty"`
	// Epoch is the registration's epoch (Peer.Epoch).
	Epoch uint64 `json:"epoch,omitempty"`
	// SharedEvents: the node reads SubjectPeerEvents (RegisterRequest).
	SharedEvents bool `json:"shared_events,omitempty"`
	// Tags are the tags of the join token of the last registration that
	// presented a live one (Peer.Tags).
	Tags []string `json:"tags,omitempty"`
}

func (n *Node) peer() Peer {
	return Peer{NodeID: n.ID, Name: n.Name, PublicKey: n.PublicKey, Address: n.Address, Epoch: n.Epoch, Tags: n.Tags}
}
