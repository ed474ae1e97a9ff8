// Package link emulates one direction of a network link, with netem-like
// impairments: latency, jitter, loss, duplication, reordering, a bandwidth
// limit with a bounded tail-drop queue, an MTU and a down state. The lab
// fabric gives every interface attachment two Pipes, one per direction, so
// each direction is impaired independently.
//
// # Model
//
// A packet handed to Pipe.Send meets the impairments in this order: a down
// link drops it; a packet longer than the MTU is dropped; Loss drops it with
// its probability; Duplicate marks it for a second delivery. What survives is
// either delivered at once or scheduled:
//
//   - Without delay-type impairments (Latency, Jitter, Reorder, Rate) and with
//     nothing pending, Send calls Deliver itself, in the caller's goroutine,
//     without allocating. This is the common case in the lab, so a perfect
//     link costs one uncontended mutex.
//   - Otherwise the packet goes to the pipe's scheduler. The bandwidth
//     limiter serializes it: it finishes leaving at max(now, previous
//     departure) + len*8/Rate, unless the bytes already waiting exceed
//     QueueBytes, in which case it is tail-dropped. Latency plus a uniform
//     jitter is added to that departure time. To keep order, as netem does
//     with a rate, a packet is never scheduled before the one sent ahead of
//     it; jitter therefore only spreads delays, it does not reorder. A
//     packet picked by Reorder is instead held back a further ReorderDelay
//     without holding up later packets, which then overtake it.
//
// While any packet is pending in the scheduler, every new packet goes
// through it too, so turning impairments off mid-flow never lets new packets
// overtake old ones. Deliver is called from one goroutine at a time, in
// delivery order.
//
// The scheduler is one goroutine per pipe, started on first need and stopped
// by Close. It sleeps on a single timer until the earliest delivery time and
// then delivers everything due in one batch. Go timers can fire up to a
// millisecond late on an idle Linux process, so the scheduler learns how late
// its timer runs and wakes that much early; delays are accurate to well under
// a millisecond either way.
//
// # Determinism
//
// Every random decision comes from a PRNG seeded with Config.Seed and is drawn
// in a fixed order per packet that does not depend on timing: the same seed
// and the same packet sequence give the same losses, duplicates, reorderings
// and jitter. Delivery instants follow the clock of the goroutine that made the
// pipe: the wall clock, or inside a testing/synctest bubble the bubble's
// virtual clock, where a packet arrives after exactly its delay. A pipe used in
// a bubble must be made in it (its channels and timer belong to the bubble).
package link
