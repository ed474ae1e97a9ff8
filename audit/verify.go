package audit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// Report describes a log Verify read.
type Report struct {
	// Lines is how many lines verified: all of them when Verify returns
	// nil, those before the bad one otherwise.
	Lines int
	// First and Last are the times of the first and last verified lines.
	First, Last time.Time
	// LastHash is the hash of the last verified line (Genesis for an empty
	// log): compare it with a hash recorded outside the log (see
	// FileWriter.Head) to detect truncation or a rewrite.
	LastHash string
	// Checkpoint is the checkpoint VerifyFile checked the log against;
	// nil when there was none (then truncation cannot be detected).
	Checkpoint *Checkpoint
}

// Verify reads a log and checks every line: that its bytes hash to its
// "hash", that its "prev" is the previous line's hash (Genesis for the
// first), and that "seq" counts lines from 1. It stops at the first bad line
// with an error wrapping a *LineError, e.g.
//
//	audit: line 7: hash mismatch: the line was edited
//	audit: line 9: prev does not match line 8: a line was removed, reordered or duplicated
//
// An empty log verifies. See the package documentation for what a chain
// cannot detect.
func Verify(r io.Reader) (Report, error) {
	rep, err := verify(r, nil)
	if err != nil {
		return rep, fmt.Errorf("audit: %w", err)
	}
	return rep, nil
}

// VerifyFile is Verify of the file at path, and of the log against its
// checkpoint (CheckpointPath), if it has one: the log must hold the
// checkpoint's line with the checkpoint's hash, or the error wraps
// ErrTruncated or ErrRewritten. Errors name the file.
func VerifyFile(path string) (Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return Report{}, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	var cp *Checkpoint
	switch c, err := ReadCheckpoint(CheckpointPath(path)); {
	case err == nil:
		cp = &c
	case !errors.Is(err, fs.ErrNotExist):
		return Report{}, err
	}
	rep, err := verify(f, cp)
	rep.Checkpoint = cp
	if err != nil {
		return rep, fmt.Errorf("audit: %s: %w", path, err)
	}
	return rep, nil
}

// verify checks the log r holds and, with cp, that it holds cp's line.
func verify(r io.Reader, cp *Checkpoint) (Report, error) {
	rep, atCheckpoint, err := verifyLines(r, cp)
	if err != nil || cp == nil {
		return rep, err
	}
	switch {
	case uint64(rep.Lines) < cp.Seq:
		return rep, fmt.Errorf("%w: the checkpoint of %s records line %d, but the log ends at line %d",
			ErrTruncated, cp.Time.Format(time.RFC3339), cp.Seq, rep.Lines)
	case atCheckpoint != cp.Hash:
		return rep, fmt.Errorf("%w: line %d's hash is not the one its checkpoint of %s records",
			ErrRewritten, cp.Seq, cp.Time.Format(time.RFC3339))
	}
	return rep, nil
}

// verifyLines checks every line, and returns the hash of line cp.Seq.
func verifyLines(r io.Reader, cp *Checkpoint) (Report, string, error) {
	rep := Report{LastHash: Genesis}
	atCheckpoint := ""
	if cp != nil && cp.Seq == 0 {
		atCheckpoint = Genesis
	}
	br := bufio.NewReaderSize(r, MaxLineLen+1)
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, io.EOF) && len(line) == 0:
			return rep, atCheckpoint, nil
		case errors.Is(err, io.EOF):
			return rep, "", &LineError{Line: n, Err: ErrIncomplete}
		case errors.Is(err, bufio.ErrBufferFull):
			return rep, "", &LineError{Line: n, Err: errTooLong}
		case err != nil:
			return rep, "", fmt.Errorf("read line %d: %w", n, err)
		}
		rec, err := parseLine(line[:len(line)-1])
		if err != nil {
			return rep, "", &LineError{Line: n, Err: err}
		}
		switch {
		case rec.Prev != rep.LastHash && n == 1:
			return rep, "", &LineError{Line: n, Err: fmt.Errorf("prev is not the genesis value: %w", ErrChain)}
		case rec.Prev != rep.LastHash:
			return rep, "", &LineError{Line: n, Err: fmt.Errorf("prev does not match line %d: %w", n-1, ErrChain)}
		case rec.Seq != uint64(n):
			return rep, "", &LineError{Line: n, Err: fmt.Errorf("%w: seq %d, want %d", ErrSeq, rec.Seq, n)}
		}
		if n == 1 {
			rep.First = rec.Time
		}
		rep.Lines, rep.Last, rep.LastHash = n, rec.Time, rec.Hash
		if cp != nil && rec.Seq == cp.Seq {
			atCheckpoint = rec.Hash
		}
	}
}
