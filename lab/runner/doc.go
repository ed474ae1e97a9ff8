// Package runner brings a topology up on the lab fabric and runs scenario
// timelines on it, all in this process: the fabric's networks, NAT routers
// and hosts; control with its embedded NATS, LRP relays and STUN servers on
// their hosts; Lattice nodes on in-process netstacks and pod-mode
// sandboxes, each serving test services on its overlay address (UDP echo
// on 7, HTTP on 80, a SHA-256 sink on 9).
//
// Up returns a Lab whose methods are what scenario steps act on (WaitPath,
// Ping, Transfer, Blackhole, RebootNAT, Move, ...): the Lab implements
// scenario.Env, each family of it in the file of the same name (paths.go,
// traffic.go, stream.go, faults.go, sandbox.go; start and stop in nodes.go
// and services.go, token lifetimes in tokens.go), and the steps themselves, with their checks and details,
// are types of package scenario. RunScenario runs a whole scenario file
// and returns a report.Result. A node can roam: its sockets live on a
// netx.Network that moves between fabric hosts (roam.go), which is how the
// lab emulates a laptop changing networks mid-transfer.
//
// A gvisor sandbox runs in a process of its own (gvisor.go), the product's
// sandbox daemon (sandbox.StartDaemon), which the lab talks to with
// sandbox.Client: the program running the lab re-executes itself, so its
// main calls MaybeRunChild.
package runner
