package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/latticelab/lattice/internal/atomicfile"
)

// The FileStore's journal. The registry file (PATH) is a snapshot; every
// change after it is one line appended to PATH.journal:
//
//	<crc32c of the JSON, 8 hex digits> <JSON>\n
//
// where the JSON is {"put":NODE} or {"del":"ID"}: a change is the node's
// whole record (or its removal), so replaying a record twice, or records
// already in the snapshot, leaves the same registry. Each line is written
// by one write(2) to a file opened O_APPEND, then fsynced before the
// change is acknowledged; concurrent changes share an fsync (group
// commit). A crash mid-append leaves at most a torn last line, which was
// never acknowledged: opening the store drops it, keeps its bytes in
// PATH.journal.torn-OFFSET and says so (FileStore.Recovered). A bad line
// with good ones after it is not a torn append: the store refuses to
// open, naming the file and the offset, and changes nothing.
//
// Compaction: when the journal outgrows twice the snapshot (at least
// FileStoreOptions.CompactBytes), the whole registry is written as a new
// snapshot, outside the store's mutex, so changes go on meanwhile
// (FileStore.Compact):
//
//  1. under the mutex: copy the registry's map (its records are never
//     changed in place) and start keeping every line appended from then
//     on (the tail);
//  2. outside it: fsync the journal up to the copy, so the snapshot holds
//     only changes that are durable anyway; write the snapshot (temporary
//     file, fsync, rename);
//  3. under the mutex: write the tail to a new journal (temporary file,
//     fsync, rename over the old one) and append to that from then on.
//
// A crash before 2's rename leaves the old snapshot and the whole
// journal; between 2 and 3 the new snapshot and the whole journal, whose
// older half replays records the snapshot already holds, to the same
// registry (each record is a node's whole state, so the last one for a
// node wins either way); after 3 the new snapshot and the tail. No crash
// loses an acknowledged change.

// journalRecord is one change.
type journalRecord struct {
	Put *Node  `json:"put,omitempty"`
	Del string `json:"del,omitempty"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeRecord is r's journal line.
func encodeRecord(r journalRecord) ([]byte, error) {
	js, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode journal record: %w", err)
	}
	line := make([]byte, 0, len(js)+10)
	line = fmt.Appendf(line, "%08x ", crc32.Checksum(js, castagnoli))
	line = append(line, js...)
	return append(line, '\n'), nil
}

// errBadFrame: a line whose framing or checksum is wrong, as a torn
// append leaves it.
var errBadFrame = errors.New("bad checksum or framing")

// decodeRecord parses one line without its newline.
func decodeRecord(line []byte) (journalRecord, error) {
	var r journalRecord
	if len(line) < 10 || line[8] != ' ' {
		return r, errBadFrame
	}
	sum, err := strconv.ParseUint(string(line[:8]), 16, 32)
	if err != nil {
		return r, errBadFrame
	}
	js := line[9:]
	if crc32.Checksum(js, castagnoli) != uint32(sum) {
		return r, errBadFrame
	}
	// The checksum matches, so control wrote this: a record that does not
	// decode is not a torn append.
	if err := json.Unmarshal(js, &r); err != nil {
		return r, fmt.Errorf("record does not decode: %w", err)
	}
	switch {
	case (r.Put == nil) == (r.Del == ""):
		return r, errors.New("record is neither one put nor one delete")
	case r.Put != nil && r.Put.ID == "":
		return r, errors.New("record puts a node without an id")
	}
	return r, nil
}

// parseJournal reads the journal b (from the file path): its records, and
// good, the offset where they end. good < len(b) with a nil error is a
// torn tail: a last line cut short or failing its checksum. A bad line
// followed by more is an error naming path:offset.
func parseJournal(path string, b []byte) (recs []journalRecord, good int, err error) {
	for good < len(b) {
		nl := bytes.IndexByte(b[good:], '\n')
		if nl < 0 {
			return recs, good, nil // torn: cut before its newline
		}
		r, err := decodeRecord(b[good : good+nl])
		if err != nil {
			if errors.Is(err, errBadFrame) && good+nl+1 == len(b) {
				return recs, good, nil // torn: the last line
			}
			return nil, good, fmt.Errorf("registry journal %s:%d: %w; it is not a torn last append (left as is)", path, good, err)
		}
		recs = append(recs, r)
		good += nl + 1
	}
	return recs, good, nil
}

// TornTailError reports the torn last append OpenFileStore dropped: a
// change never acknowledged (its fsync had not returned), as a crash
// mid-write leaves it. Its bytes are kept in Kept.
type TornTailError struct {
	Path   string // the journal
	Offset int64  // where the torn record began; the journal ends there now
	Bytes  int    // how many bytes were dropped
	Kept   string // the file holding them
}

func (e *TornTailError) Error() string {
	return fmt.Sprintf("registry journal %s:%d: a torn last record (%d bytes, never acknowledged: a crash mid-append) was dropped; its bytes are in %s",
		e.Path, e.Offset, e.Bytes, e.Kept)
}

// journal appends records to a file. Appends happen under the
// FileStore's mutex; syncTo runs outside it, so changes made while one
// fsync runs share the next.
type journal struct {
	path    string
	f       *os.File     // replaced by swapTail, under FileStore.mu and syncMu
	size    int64        // bytes in the file (under FileStore.mu)
	written atomic.Int64 // bytes ever appended, across compactions
	// tail, when not nil, keeps every line appended since a compaction
	// copied the registry (under FileStore.mu).
	tail []byte

	syncMu sync.Mutex // guards synced
	synced int64      // of written, what is durable
	// err: an fsync failed (nothing after it is known durable) or a
	// failed append could not be cut off. Atomic, so an append (under the
	// store's mutex) need not wait for an fsync running to read it.
	err atomic.Pointer[error]
}

// openJournal opens path for appending, mode 0600, size bytes long.
func openJournal(path string, size int64) (*journal, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open registry journal: %w", err)
	}
	if err := f.Chmod(0o600); err != nil { // it holds hashes of node secrets
		f.Close()
		return nil, fmt.Errorf("registry journal %s: %w", path, err)
	}
	_ = atomicfile.SyncDir(filepath.Dir(path)) // its name, when just created; not every file system syncs directories
	return &journal{path: path, f: f, size: size}, nil
}

// failed is the sticky error, nil if none.
func (j *journal) failed() error {
	if p := j.err.Load(); p != nil {
		return *p
	}
	return nil
}

// append writes line (under the store's mutex) and returns the logical
// offset syncTo must reach for it to be durable. A failed write is cut
// off again, so the journal never holds a partial line before good ones.
func (j *journal) append(line []byte) (int64, error) {
	if err := j.failed(); err != nil {
		return 0, err
	}
	n, err := j.f.Write(line)
	if err != nil {
		if n > 0 {
			if terr := j.f.Truncate(j.size); terr != nil {
				_ = j.fail(fmt.Errorf("registry journal %s: a failed append could not be cut off: %w", j.path, terr))
			}
		}
		return 0, fmt.Errorf("registry journal %s: append: %w", j.path, err)
	}
	j.size += int64(n)
	if j.tail != nil {
		j.tail = append(j.tail, line...)
	}
	return j.written.Add(int64(n)), nil
}

// fail records err as the sticky error, unless there is one.
func (j *journal) fail(err error) error {
	j.err.CompareAndSwap(nil, &err)
	return j.failed()
}

// syncTo returns once the journal is durable up to end: one fsync covers
// every line appended before it started.
func (j *journal) syncTo(end int64) error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	if err := j.failed(); err != nil {
		return err
	}
	if j.synced >= end {
		return nil
	}
	target := j.written.Load()
	if err := j.f.Sync(); err != nil {
		return j.fail(fmt.Errorf("registry journal %s: fsync: %w (changes since are not known durable: restart control)", j.path, err))
	}
	j.synced = max(j.synced, target)
	return nil
}

// reset empties the journal (under the store's mutex) once a snapshot
// holds everything in it.
func (j *journal) reset() error {
	if err := j.f.Truncate(0); err != nil {
		return fmt.Errorf("registry journal %s: empty after snapshot: %w", j.path, err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("registry journal %s: empty after snapshot: %w", j.path, err)
	}
	j.size = 0
	j.syncMu.Lock()
	j.synced = max(j.synced, j.written.Load()) // the snapshot is durable
	j.syncMu.Unlock()
	return nil
}

// keepTail starts keeping appended lines (under the store's mutex) and
// returns the logical offset the kept ones start at.
func (j *journal) keepTail() int64 {
	j.tail = []byte{}
	return j.written.Load()
}

// dropTail stops keeping appended lines (a compaction failed).
func (j *journal) dropTail() { j.tail = nil }

// swapTail makes the kept tail the whole journal (under the store's
// mutex), once a snapshot holds everything before it: the tail is written
// to a temporary file, fsynced and renamed over the journal, so a crash
// leaves the old journal or the tail, both complete over the snapshot.
// beforeRename, if not nil, runs with the tail written (tests crash there).
func (j *journal) swapTail(beforeRename func()) error {
	tail := j.tail
	j.tail = nil
	j.syncMu.Lock() // no fsync of the old file runs while it is replaced
	defer j.syncMu.Unlock()
	if err := j.failed(); err != nil {
		return err
	}
	dir := filepath.Dir(j.path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(j.path)+".tmp*")
	if err != nil {
		return fmt.Errorf("registry journal %s: new journal after snapshot: %w", j.path, err)
	}
	defer os.Remove(tmp.Name()) // after the rename there is nothing to remove
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(tail)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("registry journal %s: new journal after snapshot: %w", j.path, err)
	}
	if beforeRename != nil {
		beforeRename()
	}
	if err := os.Rename(tmp.Name(), j.path); err != nil { //nolint:gosec // the operator's --state
		return fmt.Errorf("registry journal %s: new journal after snapshot: %w", j.path, err)
	}
	_ = atomicfile.SyncDir(dir) // not every file system syncs directories
	// The journal on disk is the tail now; appends must go there.
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // the operator's --state
	if err != nil {
		return j.fail(fmt.Errorf("registry journal %s: reopen after snapshot: %w (restart control)", j.path, err))
	}
	_ = j.f.Close()
	j.f, j.size = f, int64(len(tail))
	j.synced = max(j.synced, j.written.Load()) // the tail was fsynced
	return nil
}

func (j *journal) close() error {
	if err := j.f.Close(); err != nil {
		return fmt.Errorf("registry journal %s: %w", j.path, err)
	}
	return nil
}
