// Package runner brings a topology up on the lab fabric and runs scenario
// timelines on it, all in this process: the fabric's networks, NAT routers
// and hosts; control with its embedded NATS, LRP relays and STUN servers on
// their hosts; Lattice nodes on in-process netstacks and pod-mode
// sandboxes, each serving test services on its overlay address (UDP echo
// on 7, HTTP on 80, a SHA-256 sink on 9).
//
// Up returns a Lab whose methods are the scenario steps (WaitPath, Ping,
// Transfer, Blackhole, RebootNAT, Move, ...); RunScenario runs a whole
// scenario file and returns a report.Result. A node can roam: its sockets
// live on a netx.Network that moves between fabric hosts (roam.go), which
// is how the lab emulates a laptop changing networks mid-transfer.
//
// Nodes start one at a time: node.Start reads its peer list at
// registration and subscribes to peer events afterwards, so a peer that
// registers in between is never announced to it.
package runner
