// Package fabric is the lab's emulated network: Ethernet-like segments,
// hosts with their own TCP/IP stacks, and routers that forward, NAT and
// filter between segments, all in one process and without privileges, so a
// test can put real Lattice code behind the NATs it has to get through.
//
// A Fabric is built element by element: AddNetwork (a segment with an IPv4
// prefix and an MTU), AddHost (a machine with one gVisor stack and an
// interface on one or more segments), AddRouter (interfaces on several
// segments, optionally a nat.NAT and firewall, an IPv6 nat.Stateful filter
// or a nat.NAT64 on its uplink) and, on Linux
// as root, AddKernelHost (a network namespace joined to a segment through a
// TUN device, for code that needs the kernel's own stack). Each element is
// checked when it is added (addresses on their segment and unique, gateways
// on-link, no overlapping prefixes reachable without a NAT between them, no
// route loops); a refused element leaves the fabric as it was.
//
// A *Host and a *KernelHost are netx.Networks: code that dials and listens
// through a netx.Network runs on them unchanged. TCP and ICMP on a host go
// through gVisor (via netx/gvnet); UDP sockets are served by the fabric
// itself, because UDP is the data path of everything the lab measures and
// gVisor's socket layer would cost more than the code under test.
//
// Every interface has an egress and an ingress link.Pipe carrying seeded
// impairments (latency, jitter, loss, duplication, reordering, rate, MTU,
// down) and a bounded receive queue drained by the interface's own
// goroutine. Every random decision derives from Config.Seed and an
// element's name, so a topology built the same way behaves the same way.
// NAT lifetimes run on Config.Clock, which tests advance. Network.Capture
// and Interface.CaptureInterface write pcapng, with a comment naming the
// reason on every dropped packet.
//
// Close stops every goroutine the fabric started; when it returns, none is
// left.
package fabric
