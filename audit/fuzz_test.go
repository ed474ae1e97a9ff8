package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func FuzzVerify(f *testing.F) {
	path := filepath.Join(f.TempDir(), "audit.log")
	w, err := Open(path)
	if err != nil {
		f.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if err := w.Write(testEvent(i)); err != nil {
			f.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(bytes.Replace(good, []byte("event 2"), []byte("event 9"), 1))
	f.Add([]byte(""))
	f.Add([]byte("\n"))
	f.Add([]byte("{}\n"))
	f.Add([]byte(seal(`{"seq":1,"time":"2026-05-04T10:20:31Z","kind":"x","prev":"` + Genesis + `"`)))
	var bodies []byte // the good log's lines without their hashes
	for line := range bytes.Lines(good) {
		bodies = append(bodies, unseal(string(line))+"\n"...)
	}
	f.Add(bodies)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkVerify(t, data)
		// Sealing every line gets past the hash check, to the JSON and
		// chain checks behind it.
		var sealed []byte
		for line := range bytes.Lines(data) {
			sealed = append(sealed, seal(string(bytes.TrimSuffix(line, []byte("\n"))))...)
		}
		checkVerify(t, sealed)
	})
}

func checkVerify(t *testing.T, data []byte) {
	t.Helper()
	rep, err := Verify(bytes.NewReader(data))
	if err == nil {
		if rep.Lines != bytes.Count(data, []byte{'\n'}) {
			t.Fatalf("verified %d lines of %d", rep.Lines, bytes.Count(data, []byte{'\n'}))
		}
		if rep.Lines > 0 && len(rep.LastHash) != 64 {
			t.Fatalf("bad LastHash %q", rep.LastHash)
		}
		return
	}
	var le *LineError
	if !errors.As(err, &le) {
		t.Fatalf("error without a line: %v", err)
	}
	if le.Line != rep.Lines+1 {
		t.Fatalf("error at line %d after %d good lines", le.Line, rep.Lines)
	}
}

// FuzzCheckpoint: any bytes as a checkpoint file either parse into one
// that VerifyFile then checks, or are refused as ErrMalformed; never a
// panic, and a log that verifies against a checkpoint holds its line.
func FuzzCheckpoint(f *testing.F) {
	f.Add([]byte(`{"seq":2,"hash":"` + Genesis + `","time":"2026-05-04T10:20:31Z"}`))
	f.Add([]byte(`{"seq":0,"hash":"` + Genesis + `"}`))
	f.Add([]byte(`{"seq":99,"hash":"` + Genesis + `"}` + "\n"))
	f.Add([]byte(`{"seq":-1}`))
	f.Add([]byte(`{}`))
	f.Add([]byte("null"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "audit.log")
		w, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			if err := w.Write(testEvent(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(CheckpointPath(path), data, 0o600); err != nil {
			t.Fatal(err)
		}
		cp, cerr := ReadCheckpoint(CheckpointPath(path))
		rep, err := VerifyFile(path)
		switch {
		case cerr != nil:
			if !errors.Is(cerr, ErrMalformed) || err == nil {
				t.Fatalf("checkpoint %q: %v; verify: %v", data, cerr, err)
			}
		case err == nil:
			if cp.Seq > uint64(rep.Lines) || rep.Checkpoint == nil || *rep.Checkpoint != cp {
				t.Fatalf("checkpoint %+v verified against %d lines", cp, rep.Lines)
			}
		case !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrRewritten):
			t.Fatalf("checkpoint %+v: %v", cp, err)
		}
		// Open never refuses over a checkpoint: it moves a bad one aside.
		w, err = Open(path)
		if err != nil {
			t.Fatalf("open with checkpoint %q: %v", data, err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
