package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// SyncInterval is how often a FileWriter fsyncs a log it has written to:
// a crash loses at most about this much of the log.
const SyncInterval = time.Second

// FileWriter appends events to a hash-chained log file. It is safe for
// concurrent use. See the package documentation for the format.
//
// Write does not fsync: a goroutine fsyncs every SyncInterval when there
// is something new, and Sync and Close fsync at once. After each fsync
// the head it made durable is sealed in the checkpoint file. Each line goes to
// the file in one write(2), so a reader never sees half a line from a
// live writer.
//
// After a failed write or fsync the FileWriter is broken: every later Write
// returns the first error, since the file may now end in a partial line
// that the next line would bury in the chain.
type FileWriter struct {
	path string
	f    *os.File
	now  func() time.Time

	// syncing serializes fsyncs with each other and with Close's closing
	// of f. Taken before mu, never while holding it.
	syncing sync.Mutex

	mu     sync.Mutex // guards the following fields
	enc    *lineEncoder
	seq    uint64 // of the last line written
	prev   string // hash of the last line written
	dirty  bool   // written since the last fsync began
	err    error  // sticky write or fsync failure
	closed bool

	closeOnce sync.Once
	closeErr  error
	done      chan struct{}
	wg        sync.WaitGroup
}

// Open opens the log at path for appending, creating it with mode 0600.
// It refuses:
//   - an existing file that group or other may access (ErrPermissions; the
//     error says to chmod 600 it): an audit log names every destination;
//   - a symbolic link, or anything but a regular file;
//   - a log another FileWriter has open (ErrLocked; Linux, via flock);
//   - a log whose last complete line is not a valid entry (ErrCorrupt,
//     with the line's number and what is wrong): the log is left as it
//     is, for a human to look at.
//
// A torn last line (a write cut short by a crash or a full disk: no
// trailing newline) is repaired, not refused: its bytes are moved to
// path.torn-UNIXNANO (0600), the log is cut back to its last complete
// line, and the first line Open writes says so. A checkpoint
// (CheckpointPath) that the log contradicts, being longer than the log or
// naming another hash at its last line, is moved aside to
// path.head.mismatch-UNIXNANO, and a line says that too.
//
// An existing log's chain continues from its last line. Open checks only
// that line and the checkpoint; VerifyFile checks the whole file.
func Open(path string) (*FileWriter, error) {
	f, created, err := openFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	w, notes, err := newFileWriter(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	if created {
		// Make the new directory entry durable along with the first lines.
		_ = syncDir(filepath.Dir(path))
	}
	for _, n := range notes {
		if err := w.Write(Event{Kind: "audit", Detail: n}); err != nil {
			f.Close()
			return nil, err
		}
	}
	w.wg.Add(1)
	go w.syncLoop()
	return w, nil
}

// newFileWriter checks f and finds where its chain ends, repairing a torn
// last line. It returns the notes Open records about what it found.
func newFileWriter(path string, f *os.File) (*FileWriter, []string, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("audit: stat %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("audit: %s is not a regular file (%v)", path, info.Mode().Type())
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, nil, fmt.Errorf("%w: %s has mode %#o; run chmod 600 %s", ErrPermissions, path, uint32(perm), path)
	}
	if err := lockFile(f); err != nil {
		return nil, nil, fmt.Errorf("audit: lock %s: %w", path, err)
	}
	var notes []string
	size := info.Size()
	seq, prev, err := lastLine(f, size)
	if errors.Is(err, ErrIncomplete) {
		var note string
		if note, size, err = repairTorn(f, path, size, time.Now()); err != nil {
			return nil, nil, err
		}
		notes = append(notes, note)
		seq, prev, err = lastLine(f, size)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w; refusing to append (the file was not changed)", ErrCorrupt, path, err)
	}
	note, err := checkCheckpoint(path, seq, prev, time.Now())
	if err != nil {
		return nil, nil, err
	}
	if note != "" {
		notes = append(notes, note)
	}
	return &FileWriter{
		path: path,
		f:    f,
		now:  time.Now,
		enc:  newLineEncoder(),
		seq:  seq,
		prev: prev,
		done: make(chan struct{}),
	}, notes, nil
}

// lastLine returns the seq and hash of the last line of a log of the given
// size, or 0 and Genesis for an empty one.
func lastLine(f *os.File, size int64) (uint64, string, error) {
	if size == 0 {
		return 0, Genesis, nil
	}
	// The last line, newline included, is at most MaxLineLen+1 bytes; one
	// more byte shows the newline before it.
	n := min(size, MaxLineLen+2)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, size-n); err != nil {
		return 0, "", fmt.Errorf("read: %w", err)
	}
	if buf[n-1] != '\n' {
		lines, err := countLines(f)
		if err != nil {
			return 0, "", err
		}
		return 0, "", &LineError{Line: lines + 1, Err: ErrIncomplete}
	}
	raw := buf[:n-1]
	if i := bytes.LastIndexByte(raw, '\n'); i >= 0 {
		raw = raw[i+1:]
	} else if n < size || len(raw) > MaxLineLen {
		lines, err := countLines(f)
		if err != nil {
			return 0, "", err
		}
		return 0, "", &LineError{Line: lines, Err: errTooLong}
	}
	rec, err := parseLine(raw)
	if err != nil {
		lines, cerr := countLines(f)
		if cerr != nil {
			return 0, "", cerr
		}
		return 0, "", &LineError{Line: lines, Err: err}
	}
	return rec.Seq, rec.Hash, nil
}

// countLines counts the newlines in f, to name a bad line by its number.
func countLines(f *os.File) (int, error) {
	buf := make([]byte, 64<<10)
	lines := 0
	for off := int64(0); ; {
		n, err := f.ReadAt(buf, off)
		lines += bytes.Count(buf[:n], []byte{'\n'})
		off += int64(n)
		if err == io.EOF {
			return lines, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read: %w", err)
		}
	}
}

// Write appends ev as the next line of the log. It fills a zero Time with
// the current time, records times in UTC, and cuts fields longer than
// MaxFieldLen or MaxDetailLen.
func (w *FileWriter) Write(ev Event) error {
	if ev.Kind == "" {
		return ErrNoKind
	}
	ev = ev.clipped()
	if ev.Time.IsZero() {
		ev.Time = w.now()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	rec := record{
		Seq: w.seq + 1, Time: ev.Time.UTC(), Kind: ev.Kind, Decision: ev.Decision, Proto: ev.Proto,
		Src: ev.Src, Dst: ev.Dst, Rule: ev.Rule, Detail: ev.Detail, Prev: w.prev,
	}
	line, hash, err := w.enc.encode(&rec)
	if err != nil {
		return fmt.Errorf("audit: encode %s event: %w", ev.Kind, err) // nothing written
	}
	if _, err := w.f.Write(line); err != nil {
		w.err = fmt.Errorf("audit: write %s: %w", w.path, err)
		return w.err
	}
	w.seq, w.prev, w.dirty = rec.Seq, hash, true
	return nil
}

// Head returns the seq and hash of the last line written, or 0 and Genesis
// for an empty log. Recording them outside the log (printing them at stop,
// sending them to a control plane) anchors the chain: a log that verifies
// and ends in the same hash was not truncated or rewritten since.
func (w *FileWriter) Head() (seq uint64, hash string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seq, w.prev
}

// Sync fsyncs what was written so far.
func (w *FileWriter) Sync() error {
	w.syncing.Lock()
	defer w.syncing.Unlock()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if w.err != nil {
		w.mu.Unlock()
		return w.err
	}
	dirty := w.dirty
	w.dirty = false
	cp := Checkpoint{Seq: w.seq, Hash: w.prev, Time: w.now().UTC()}
	w.mu.Unlock()
	return w.fsyncSyncing(dirty, cp)
}

// fsyncSyncing fsyncs if dirty, then seals what it made durable in the
// checkpoint (cp, taken before the fsync, so it never claims a line the
// disk may not have). w.syncing must be held, w.mu not, so that Write is
// not held up by the disk. A failure of either is sticky, like a failed
// write: truncation could no longer be detected.
func (w *FileWriter) fsyncSyncing(dirty bool, cp Checkpoint) error {
	if !dirty {
		return nil
	}
	err := w.f.Sync()
	if err != nil {
		err = fmt.Errorf("audit: fsync %s: %w", w.path, err)
	} else if cerr := writeCheckpoint(CheckpointPath(w.path), cp); cerr != nil {
		err = fmt.Errorf("audit: checkpoint %s: %w", CheckpointPath(w.path), cerr)
	}
	if err != nil {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
	return err
}

func (w *FileWriter) syncLoop() {
	defer w.wg.Done()
	t := time.NewTicker(SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
			_ = w.Sync() // a failure is sticky; Write reports it
		}
	}
}

// Close fsyncs and closes the log. It is idempotent; every call returns
// the first call's result.
func (w *FileWriter) Close() error {
	w.closeOnce.Do(func() {
		close(w.done)
		w.wg.Wait()
		w.syncing.Lock()
		defer w.syncing.Unlock()
		w.mu.Lock()
		w.closed = true
		dirty := w.dirty && w.err == nil
		w.dirty = false
		cp := Checkpoint{Seq: w.seq, Hash: w.prev, Time: w.now().UTC()}
		w.mu.Unlock()
		err := w.fsyncSyncing(dirty, cp)
		if cerr := w.f.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("audit: close %s: %w", w.path, cerr))
		}
		w.closeErr = err
	})
	return w.closeErr
}
