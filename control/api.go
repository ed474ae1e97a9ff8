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
	"time"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// decodeRequest parses a registration body strictly.
func decodeRequest(b []byte) (*controlapi.RegisterRequest, error) {
	if len(b) > controlapi.MaxRequestBytes {
		return nil, &controlapi.Error{Code: controlapi.CodeBadRequest, Message: fmt.Sprintf("request is %d bytes, at most %d", len(b), controlapi.MaxRequestBytes)}
	}
	var r controlapi.RegisterRequest
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, &controlapi.Error{Code: controlapi.CodeBadRequest, Message: "malformed request: " + err.Error()}
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
	// ProofStamp is the latest stamp of a stamped proof the node
	// registered with (stamp.go): a later one must be greater.
	ProofStamp int64 `json:"proof_stamp,omitempty"`
	// Epoch is the registration's epoch (Peer.Epoch).
	Epoch uint64 `json:"epoch,omitempty"`
	// SharedEvents: the node reads SubjectPeerEvents (RegisterRequest).
	SharedEvents bool `json:"shared_events,omitempty"`
	// Tags are the tags of the join token of the last registration that
	// presented a live one (Peer.Tags).
	Tags []string `json:"tags,omitempty"`

	// rev is the store's revision of the record as read (KVStore; 0:
	// unknown): an Update of it fails with ErrConflict if the record
	// changed since, so a write read before another instance's never
	// overwrites it. Update and Create set it to the revision written.
	rev uint64
}

func (n *Node) peer() controlapi.Peer {
	return controlapi.Peer{NodeID: n.ID, Name: n.Name, PublicKey: n.PublicKey, Address: n.Address, Epoch: n.Epoch, Tags: n.Tags, Rev: n.rev}
}
