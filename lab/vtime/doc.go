// Package vtime tells whether this build can run gVisor stacks on virtual
// time, inside a testing/synctest bubble.
//
// A bubble's clock moves only when every goroutine in it is durably blocked.
// gVisor's pkg/sleep and pkg/syncevent park their goroutines (every TCP
// processor among them) through gopark with the runtime's plain "select" wait
// reason, which synctest does not count as durable, so a bubble holding a
// gVisor stack with any delayed link never advances. The fix is one constant,
// gvisor.dev/gvisor/pkg/sync.WaitReasonSelect: scripts/vtime-flags.sh prints a
// `go build -overlay` flag that swaps the module cache's file defining it for
// a copy naming the runtime's waitReasonSynctestSelect ("select (durable)").
// Builds without the flag (a bare go test) lack it; Available says so and how
// to get it. docs/VIRTUAL_TIME.md has the route chosen, its costs and the
// upstream patch that would make this package unnecessary.
//
// The package lives under lab/ because gVisor may be imported only by lab/ and
// netstack/, and virtual time is the lab's concern.
package vtime
