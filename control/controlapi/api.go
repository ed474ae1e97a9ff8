// Package controlapi is the control plane's API as a node sees it: the
// wire types of registration, peer events and signaling, NATS subjects and
// error codes, control URLs and how to trust them, and the client (Join,
// RegisterNATS, RegisterHTTP, Session). It does not link the control
// server nor the NATS server embedded in it (package control), so that a
// node or sandbox binary carries only what a client needs.
package controlapi

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/latticelab/lattice/key"
)

// Subjects. The version is part of every subject so that a later protocol
// can run beside this one.
const (
	SubjectRegister = "lattice.v1.register"
	// SubjectServers is a joining client's request for the relays and
	// STUN servers control announces (servers.go).
	SubjectServers = "lattice.v1.servers"
	// NodeSubjectPrefix begins every node subject (NodeSubject).
	NodeSubjectPrefix = "lattice.v1.node."
	// SubjectPeerEvents carries every PeerEvent once, to every node that
	// registered with SharedEvents: one change is one message, however
	// many nodes there are. Nodes may only subscribe to it.
	SubjectPeerEvents = "lattice.v1.peers"
	// InboxPrefix is where a node's NATS replies arrive: the node sets its
	// connection's inbox prefix to InboxPrefix + "." + its NATS user.
	InboxPrefix = "_INBOX"
	// JoinPrefix begins a joining client's NATS user: JoinPrefix and 32
	// random hex digits, its password the join token.
	JoinPrefix = "join."
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
func NodeSubject(nodeID, leaf string) string { return NodeSubjectPrefix + nodeID + "." + leaf }

// Limits on what a registration may carry.
const (
	MaxRequestBytes = 16 << 10
	MaxTokenBytes   = 512
	MaxSignalBytes  = 16 << 10
)

// RegisterRequest is what a node sends to join. It proves the node holds
// the private key of PublicKey in one of two ways (see proof.go). With a
// stamped proof (Stamp, ControlKey and Proof: ProveKeyAt) it is one
// request. Otherwise the first request has no Challenge and no Proof and
// is answered with a challenge only; the second carries that Challenge
// back and the Proof (ProveKey).
type RegisterRequest struct {
	Token     string     `json:"token"`
	Name      string     `json:"name"`
	PublicKey key.Public `json:"public_key"`
	Challenge *Challenge `json:"challenge,omitempty"`
	Proof     []byte     `json:"proof,omitempty"`
	// Stamp is a stamped proof's time (Unix ns, the node's clock) and
	// ControlKey the control register key it is keyed to; zero without.
	Stamp      int64      `json:"stamp,omitempty"`
	ControlKey key.Public `json:"control_key,omitzero"`
	// SharedEvents: the node takes peer events from SubjectPeerEvents
	// (NATSCreds.Events), so control sends it none of its own. A node
	// without it gets each event on its LeafPeers subject, as before.
	SharedEvents bool `json:"shared_events,omitempty"`
}

// RegisterResponse is what a node gets back. An answer to a request
// without a proof (or with a stamped one control cannot judge) carries
// only Challenge and ControlKey.
type RegisterResponse struct {
	Challenge *Challenge `json:"challenge,omitempty"`
	// ControlKey is control's static register key, for the node's next
	// stamped proof (zero from a control without stamped proofs).
	ControlKey key.Public `json:"control_key,omitzero"`

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
	// Rev is the registry's revision of the peer's record as the sender
	// had it (0: unknown; a registry of one control instance). Control
	// instances sharing a registry publish events and answer lists
	// independently, so what a node receives from two of them has no
	// order of its own: revisions give it one (see PeerPage.Rev). In a
	// PeerRemoved event it is the revision of the record removed.
	Rev uint64 `json:"rev,omitempty"`
	// Reg names the registry Rev counts in, in a peer event: when it was
	// made (Unix ns; 0: unknown). A registry made again (a bucket
	// recreated) numbers its revisions from 1 again; a larger Reg is the
	// later registry, and revisions of two registries are not compared.
	// In a peer list, the list's Reg stands for its entries'.
	Reg uint64 `json:"reg,omitempty"`
}

// Equal reports whether p and q describe the peer alike. Rev and Reg,
// where the description came from, are not compared.
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

// ErrorReply wraps an Error for the wire: {"error": {...}}.
type ErrorReply struct {
	Error *Error `json:"error"`
}

// ValidName reports whether s is a valid node name or tag: 1-63 lowercase
// letters, digits and inner hyphens (a DNS label). It is written out, not
// a regexp, so that no binary compiles one at start for it.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// Validate checks a request's fields, naming the first bad one.
func (r *RegisterRequest) Validate() error {
	switch {
	case r.Token == "":
		return &Error{Code: CodeBadToken, Message: "no join token"}
	case len(r.Token) > MaxTokenBytes:
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("token is %d bytes, at most %d", len(r.Token), MaxTokenBytes)}
	case r.Name == "":
		return &Error{Code: CodeBadRequest, Message: "name is empty"}
	case !ValidName(r.Name):
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("name %q: use 1-63 lowercase letters, digits and inner hyphens", truncate(r.Name, 80))}
	case r.PublicKey.IsZero():
		return &Error{Code: CodeBadRequest, Message: "public key is missing or all zeros"}
	case r.Stamp != 0 && (r.Challenge != nil || r.Proof == nil || r.ControlKey.IsZero()):
		return &Error{Code: CodeBadRequest, Message: "a stamp comes with a proof and a control key, and no challenge"}
	case r.Stamp == 0 && !r.ControlKey.IsZero():
		return &Error{Code: CodeBadRequest, Message: "a control key without a stamp"}
	case r.Stamp == 0 && (r.Challenge == nil) != (r.Proof == nil):
		return &Error{Code: CodeBadRequest, Message: "challenge and proof come together or not at all"}
	case len(r.Proof) > 64:
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("proof is %d bytes, at most 64", len(r.Proof))}
	case r.Challenge != nil && len(r.Challenge.Nonce) > 64:
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("challenge nonce is %d bytes, at most 64", len(r.Challenge.Nonce))}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
