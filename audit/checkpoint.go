package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Checkpoint is a sealed head of a log: its seq and hash as of some fsync,
// kept in a separate file (CheckpointPath) that a FileWriter replaces
// atomically after each fsync. A log that no longer holds line Seq with
// hash Hash was truncated or rewritten, which the chain alone cannot show.
type Checkpoint struct {
	Seq  uint64    `json:"seq"`
	Hash string    `json:"hash"`
	Time time.Time `json:"time"`
}

// CheckpointPath is where the checkpoint of the log at path lives.
func CheckpointPath(path string) string { return path + ".head" }

// maxCheckpointLen bounds a checkpoint file: one short JSON object.
const maxCheckpointLen = 4 << 10

// ReadCheckpoint reads the checkpoint at path (a CheckpointPath). It
// returns an error wrapping fs.ErrNotExist when there is none, and one
// wrapping ErrMalformed for a file that is no checkpoint.
func ReadCheckpoint(path string) (Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("audit: checkpoint: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCheckpointLen+1))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("audit: checkpoint %s: %w", path, err)
	}
	return parseCheckpoint(path, data)
}

func parseCheckpoint(path string, data []byte) (Checkpoint, error) {
	if len(data) > maxCheckpointLen {
		return Checkpoint{}, fmt.Errorf("audit: checkpoint %s: %w: more than %d bytes", path, ErrMalformed, maxCheckpointLen)
	}
	var cp Checkpoint
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cp); err != nil {
		return Checkpoint{}, fmt.Errorf("audit: checkpoint %s: %w: %w", path, ErrMalformed, err)
	}
	if rest := bytes.TrimSpace(data[dec.InputOffset():]); len(rest) > 0 {
		return Checkpoint{}, fmt.Errorf("audit: checkpoint %s: %w: data after the JSON object", path, ErrMalformed)
	}
	if len(cp.Hash) != sha256.Size*2 || !isHex([]byte(cp.Hash)) {
		return Checkpoint{}, fmt.Errorf("audit: checkpoint %s: %w: hash is not a SHA-256", path, ErrMalformed)
	}
	if cp.Seq == 0 && cp.Hash != Genesis {
		return Checkpoint{}, fmt.Errorf("audit: checkpoint %s: %w: seq 0 with a hash other than the genesis value", path, ErrMalformed)
	}
	return cp, nil
}

// writeCheckpoint replaces the checkpoint at path atomically: a temporary
// file beside it (0600), fsynced, renamed over it, the directory fsynced.
// A crash leaves the old checkpoint or the new one, never half of one.
func writeCheckpoint(path string, cp Checkpoint) error {
	data, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return err
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	ok = true
	return syncDir(filepath.Dir(path))
}

// checkCheckpoint compares the log's last line (seq, hash) with its
// checkpoint, as Open finds them. It returns a note for the log, or "" if
// they agree or there is no checkpoint. A checkpoint the log contradicts
// is renamed aside (its name is in the note) so that the next one does
// not bury the evidence.
func checkCheckpoint(path string, seq uint64, hash string, now time.Time) (string, error) {
	cpPath := CheckpointPath(path)
	cp, err := ReadCheckpoint(cpPath)
	var problem string
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case errors.Is(err, ErrMalformed):
		problem = err.Error()
	case err != nil:
		return "", err
	case cp.Seq > seq:
		problem = fmt.Sprintf("checkpoint records line %d but the log ends at line %d: the log was truncated", cp.Seq, seq)
	case cp.Seq == seq && cp.Hash != hash:
		problem = fmt.Sprintf("line %d's hash is not the checkpoint's: the log was rewritten", seq)
	default:
		return "", nil
	}
	aside := fmt.Sprintf("%s.mismatch-%d", cpPath, now.UnixNano())
	if err := os.Rename(cpPath, aside); err != nil {
		return "", fmt.Errorf("audit: move aside checkpoint %s: %w", cpPath, err)
	}
	return problem + "; checkpoint moved to " + filepath.Base(aside), nil
}
