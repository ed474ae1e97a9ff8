package audit

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// repairTorn moves the bytes after the last newline of a log of the given
// size (a write cut short) to path.torn-UNIXNANO and cuts the log back to
// its last complete line. It returns the note for the log and the new
// size. The torn bytes are saved before the log is cut, so a failure
// leaves the log as it was. A tail longer than any line (MaxLineLen) is
// no torn write of ours: that is left alone, as corrupt.
func repairTorn(f *os.File, path string, size int64, now time.Time) (string, int64, error) {
	n := min(size, MaxLineLen+1)
	tail := make([]byte, n)
	if _, err := f.ReadAt(tail, size-n); err != nil {
		return "", 0, fmt.Errorf("audit: read %s: %w", path, err)
	}
	cut := size - n // where the torn line starts
	if i := bytes.LastIndexByte(tail, '\n'); i >= 0 {
		cut += int64(i) + 1
		tail = tail[i+1:]
	} else if n < size {
		lines, err := countLines(f)
		if err != nil {
			return "", 0, err
		}
		return "", 0, fmt.Errorf("%w: %s: %w; refusing to append (the file was not changed)", ErrCorrupt, path, &LineError{Line: lines + 1, Err: errTooLong})
	}
	aside := fmt.Sprintf("%s.torn-%d", path, now.UnixNano())
	if err := saveAside(aside, tail); err != nil {
		return "", 0, fmt.Errorf("audit: %s ends in a torn line; saving it to %s before repairing: %w", path, aside, err)
	}
	if err := f.Truncate(cut); err != nil {
		return "", 0, fmt.Errorf("audit: repair torn line of %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return "", 0, fmt.Errorf("audit: repair torn line of %s: fsync: %w", path, err)
	}
	lines, err := countLines(f)
	if err != nil {
		return "", 0, err
	}
	note := fmt.Sprintf("repaired a torn last line: %d bytes after line %d (a write cut short) moved to %s", len(tail), lines, filepath.Base(aside))
	return note, cut, nil
}

// saveAside writes data to a new file at path, 0600, durably.
func saveAside(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return err
	}
	return syncDir(filepath.Dir(path))
}
