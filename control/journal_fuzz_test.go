package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzJournal parses arbitrary bytes as the registry's journal, then opens
// them as one. Nothing panics. The parser either refuses, naming
// path:offset, or returns records that end at an offset of a line's end,
// after which only a torn last line may follow; the records re-encode to
// a journal that parses to the same records with nothing torn. Opening
// the store refuses the same bytes (leaving them as they were) or opens
// with the journal cut where the parser said, the cut bytes kept.
func FuzzJournal(f *testing.F) {
	var good []byte
	for i := range 3 {
		line, _ := encodeRecord(journalRecord{Put: journalNode(i)})
		good = append(good, line...)
	}
	del, _ := encodeRecord(journalRecord{Del: "n00001"})
	good = append(good, del...)
	f.Add(good)
	f.Add(good[:len(good)-7])
	f.Add(append(bytes.Clone(good), 0, 0, 0))
	f.Add([]byte("00000000 {}\n"))
	f.Add([]byte("0000000g {\"del\":\"a\"}\n" + string(del)))
	f.Add([]byte(`7a1b3c4d {"put":{"id":""}}` + "\n"))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		const name = "/r.json.journal"
		recs, at, err := parseJournal(name, b)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%s:%d:", name, at)) {
				t.Fatalf("error %q does not name %s:%d", err, name, at)
			}
		} else {
			if at > len(b) || (at > 0 && b[at-1] != '\n') {
				t.Fatalf("records end at %d, not after a newline", at)
			}
			if rest := b[at:]; bytes.IndexByte(rest, '\n') >= 0 && bytes.IndexByte(rest, '\n') != len(rest)-1 {
				t.Fatalf("more than one line after the records (%q) taken as a torn tail", rest)
			}
			var again []byte
			for _, r := range recs {
				line, err := encodeRecord(r)
				if err != nil {
					t.Fatal(err)
				}
				again = append(again, line...)
			}
			recs2, at2, err := parseJournal(name, again)
			if err != nil || at2 != len(again) {
				t.Fatalf("re-encoded records: %v at %d of %d", err, at2, len(again))
			}
			j1, _ := json.Marshal(recs)
			j2, _ := json.Marshal(recs2)
			if !bytes.Equal(j1, j2) {
				t.Fatalf("records %s re-parsed as %s", j1, j2)
			}
		}

		path := filepath.Join(t.TempDir(), "registry.json")
		jp := JournalPath(path)
		if err := os.WriteFile(jp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, oerr := OpenFileStore(path)
		if oerr != nil {
			if !strings.Contains(oerr.Error(), path) {
				t.Fatalf("error %q does not name the registry", oerr)
			}
			if now, _ := os.ReadFile(jp); !bytes.Equal(now, b) {
				t.Fatal("a refused journal was changed")
			}
			return
		}
		defer s.j.close() // not Close: its compaction fsyncs, and fuzzing wants speed
		if err != nil {
			t.Fatalf("the store opened a journal the parser refused (%v)", err)
		}
		now, _ := os.ReadFile(jp)
		if !bytes.Equal(now, b[:at]) {
			t.Fatalf("journal cut to %d bytes, want %d", len(now), at)
		}
		if (s.Recovered() != nil) != (at < len(b)) {
			t.Fatalf("Recovered() = %v with %d of %d bytes good", s.Recovered(), at, len(b))
		}
		if _, err := s.List(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
