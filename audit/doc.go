// Package audit writes the sandbox's tamper-evident audit log: every egress
// decision, connection, inbound forward, policy change, start and stop, one
// JSON line each, chained by SHA-256 so that edits show.
//
// The sandbox passes a Sink around; a FileWriter is the real one, Discard
// the no-op.
//
// # File format
//
// A log is UTF-8 JSON Lines: one object per line, each line ending in
// "\n", no blank lines. A line looks like this (wrapped here):
//
//	{"seq":3,"time":"2026-05-04T10:20:30.123456789Z","kind":"egress","decision":"deny",
//	 "proto":"tcp","src":"100.64.0.7:41234","dst":"10.1.2.3:22","rule":"policy.yaml:8 deny 10.0.0.0/8",
//	 "prev":"5e0f…(64 hex digits)","hash":"a3c1…(64 hex digits)"}
//
// Fields, in this order:
//
//	seq       1 for the first line, then +1 per line
//	time      RFC 3339 in UTC, nanoseconds
//	kind      what happened: start, stop, connect, egress, forward, policy, ...
//	decision  allow or deny (omitted when empty, as are the four below)
//	proto     tcp, udp, icmp, ...
//	src, dst  endpoints
//	rule      the policy rule that decided
//	detail    free text, at most 1 KiB (MaxDetailLen)
//	prev      the previous line's hash; for the first line, Genesis, the hex
//	          SHA-256 of "lattice audit log v1"
//	hash      hex SHA-256 of this line's bytes from its "{" up to, not
//	          including, the ",\"hash\":" that ends it
//
// The hash is over the exact bytes on disk, not over a re-encoding, so the
// verifier needs no canonical JSON: any change to any byte before "hash"
// breaks the line's own hash; a change to "hash" itself breaks the next
// line's "prev". Because each line's prev is the hash of the line before,
// which covers that line's prev in turn, each hash commits to every line up
// to it. Verify checks, line by line: the hash, the chain (prev), and seq.
//
//	edited byte, changed value    "line N: hash mismatch: the line was edited"
//	removed, swapped, duplicated  "line N: prev does not match line N-1: a line was removed, reordered or duplicated"
//	torn last write               "line N: incomplete line (no trailing newline)"
//	not an entry                  "line N: malformed line: ..."
//
// # Checkpoints: what the chain alone does not detect
//
// There is no secret in the chain: anyone who can write the file can
// recompute it. So the chain alone cannot show truncation (removing the
// last lines leaves a valid, shorter log), a rewrite (editing a line and
// recomputing every hash after it), or a replacement by a fresh log.
//
// A FileWriter therefore seals the head it has made durable (seq, hash,
// time) after every fsync, and at Close, in a checkpoint file beside the
// log (CheckpointPath: the log's path + ".head"), replaced atomically
// (temporary file, fsync, rename, directory fsync). VerifyFile checks the
// log against it: a log shorter than its checkpoint is ErrTruncated, one
// whose line at the checkpoint's seq has another hash is ErrRewritten.
// `lattice audit verify` reports both.
//
// The checkpoint sits beside the log, so an attacker who can write both
// can rewrite both. Copy it out of their reach (ship it to the control
// plane or a collector, or print FileWriter.Head at stop, as the sandbox
// does) to make that detectable too: a log that verifies and still holds
// the anchored hash at the anchored seq was not cut or rewritten before it.
//
// # Durability and repair
//
// Write appends with one write(2) and does not wait for the disk. A
// FileWriter fsyncs every SyncInterval (1s) when it has written something,
// on Sync, and on Close, so a machine crash loses at most about a second.
// A process crash loses nothing written. A failed write, fsync or
// checkpoint (a full disk: ENOSPC) is sticky: every later Write fails, and
// the sandbox, fail-closed by default, denies new flows.
//
// A crash or a full disk can leave a torn last line (a partial write).
// Open repairs it rather than refusing to start: the torn bytes are moved
// to path.torn-UNIXNANO, the log is cut back to its last complete line,
// and the first new line (kind "audit") says what was moved where. A
// checkpoint the log contradicts at Open is moved aside to
// path.head.mismatch-UNIXNANO and recorded the same way, so the next
// checkpoint does not bury the evidence. A last complete line that is not
// a valid entry is still refused (ErrCorrupt), for a human to look at.
//
// The file is created 0600 and an existing one readable or writable by
// group or other is refused: the log names every destination the agent
// tried. On Linux a FileWriter holds an flock on the log, so two writers
// cannot fork the chain, and never opens it through a symbolic link.
package audit
