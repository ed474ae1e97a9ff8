// Package gate is the prestart hook that holds a prepared gVisor
// container's start: runsc boots the sandbox, runs the hook, and starts
// the agent only when the hook exits 0. The hook is the sandbox's own
// binary re-executed as Arg0; it reads one byte from the FIFO its
// argument names: Open lets the container start, anything else (the
// writer closing, because the sandbox gave up or died) makes the hook
// fail, and runsc then destroys the container.
//
// It is a leaf package, importing only the standard library, so that its
// init() runs before the binary's heavy packages and the hook skips their
// initialisation (see sandbox/podinit for the same trick).
package gate

// Arg0 is argv[0] of the binary re-executed as the gate hook.
const Arg0 = "lattice-runsc-gate"

// Open is the byte that lets the container start.
const Open = 'y'
