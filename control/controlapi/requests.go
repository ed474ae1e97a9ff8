package controlapi

// ServersRequest, SubjectServers: a client that holds only a join token
// (lattice netcheck on a host with no node) learns the relays and STUN
// servers a registration would announce; nothing is registered.

// ServersRequest asks for the announced servers.
type ServersRequest struct {
	Token string `json:"token"`
}

// ServersResponse is what a registration would announce.
type ServersResponse struct {
	Relays []Relay  `json:"relays"`
	STUN   []string `json:"stun"`
}

// The peer list of a large mesh does not fit one NATS message (64 KiB is
// about 465 peers), so it comes in pages, in node ID order.

// PeerListRequest asks for the page of peers after After (a node ID; empty
// for the first page).
type PeerListRequest struct {
	After string `json:"after,omitempty"`
}

// PeerPage is a page of the peer list; More says another follows.
type PeerPage struct {
	Peers []Peer `json:"peers"`
	More  bool   `json:"more,omitempty"`
	// Rev: the page holds every registry change up to this revision, so
	// a node absent from it (within the page's range of IDs) was removed
	// at or before Rev, or registered after. 0: unknown (a registry of
	// one control instance, or a control from before revisions).
	Rev uint64 `json:"rev,omitempty"`
	// Reg names the registry Rev counts in (Peer.Reg).
	Reg uint64 `json:"reg,omitempty"`
}

// PeerList is the whole peer list, as Session.PeerList assembles it from
// its pages. Rev is the lowest of the pages' (PeerPage.Rev): the list
// holds every change up to it, in the registry Reg names (PeerPage.Reg).
// Pages of two registries (one made again while the list was asked for)
// make a list of unknown revision: Rev and Reg 0.
type PeerList struct {
	Peers []Peer
	Rev   uint64
	Reg   uint64
}

// PresenceRequest is a node's heartbeat (Online) or its goodbye.
type PresenceRequest struct {
	Online bool `json:"online"`
	// Epoch is the registration the sender runs under
	// (RegisterResponse.Epoch); zero if it does not say. Control ignores
	// a request from an earlier registration: a goodbye still in flight
	// when the node, restarted, registered again.
	Epoch uint64 `json:"epoch,omitempty"`
}

// RelayTokenResponse answers a LeafRelayToken request.
type RelayTokenResponse struct {
	Token string `json:"token"`
}
