// Package pagetrim lets a long-running process give back the memory it
// needed only to start: the pages of its own executable that start-up
// touched (every package's init, flag parsing, registration, TLS) and the
// heap start-up left free; and, while it idles, what each of the
// runtime's collections maps again (Idle).
//
// Go binaries are mapped from the file; the kernel maps a page cache
// folio or a fault-around window (64 KiB) at each fault, so a process that
// has touched code all over its binary at start keeps most of it in its
// resident set (VmRSS, RssFile) for good, though it runs a small part of
// it while idle. Unmapping those pages costs nothing: they stay in the
// page cache, and a page used again is mapped again at its next fault
// without reading the disk.
package pagetrim

// Stats say what Release gave back.
type Stats struct {
	// Unmapped is how many bytes of the executable's read-only mappings
	// were resident and are no longer mapped.
	Unmapped int64
	// Skipped counts the executable's read-only mappings left alone
	// because they hold private copies of pages (relocated data made
	// read-only after: unmapping would lose the copy).
	Skipped int
}
