package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/internal/cli"
)

// writePrivate writes b to a fresh 0600 file in the test's directory.
func writePrivate(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tokenLines is the reference reading of a token file: the first field of
// every line that is not blank once its comment is cut.
func tokenLines(b []byte) []string {
	var out []string
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\n")
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if fields := strings.Fields(line); len(fields) > 0 {
			out = append(out, fields[0])
		}
	}
	return out
}

// FuzzReadTokens reads arbitrary bytes as control's join-token file.
// Nothing panics; every error names the file; what is accepted is every
// token line of the file, in order, each at least 16 bytes with no
// whitespace or '#', so that no line is ever silently skipped.
func FuzzReadTokens(f *testing.F) {
	f.Add([]byte("my-join-token-0123456789\n"))
	f.Add([]byte("# comment\n  tok-0123456789abcdef 2027-01-01T00:00:00Z # until then\n\nsecond-token-0123456789\n"))
	f.Add([]byte("short\n"))
	f.Add([]byte("tok-0123456789abcdef 2027-13-01\n"))
	f.Add([]byte("tok-0123456789abcdef a b\n"))
	f.Add([]byte("tok-0123456789abcdef tags=router,db 2027-01-01T00:00:00Z\n"))
	f.Add([]byte("tok-0123456789abcdef tags=Router,\n"))
	f.Add([]byte("tok-0123456789abcdef tags=a tags=b\n"))
	f.Add([]byte("tok-0123456789abcdef\r\nother-token-0123456789\r\n"))
	f.Add([]byte("#only a comment"))
	f.Add(append(bytes.Repeat([]byte("x"), bufio.MaxScanTokenSize+1), "\nlast-token-0123456789\n"...))
	f.Add(append([]byte("first-token-0123456789\n"), append(bytes.Repeat([]byte("y"), bufio.MaxScanTokenSize), "\nlast-token-0123456789\n"...)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := writePrivate(t, "tokens", b)
		toks, err := readTokens(path)
		if err != nil {
			if toks != nil {
				t.Fatalf("tokens %d with error %v", len(toks), err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name %s", err, path)
			}
			return
		}
		want := tokenLines(b)
		if len(toks) == 0 || len(toks) != len(want) {
			t.Fatalf("%d tokens accepted from %d token lines", len(toks), len(want))
		}
		for i, tok := range toks {
			if tok.Value != want[i] || len(tok.Value) < 16 || strings.ContainsAny(tok.Value, "# \t\r\n") {
				t.Fatalf("token %d is %q, the file says %q", i+1, tok.Value, want[i])
			}
			if !tok.Expires.IsZero() && tok.Expires.Format(time.RFC3339) == "" {
				t.Fatalf("token %d: expiry %v", i+1, tok.Expires)
			}
			for _, tag := range tok.Tags {
				if !controlapi.ValidName(tag) {
					t.Fatalf("token %d: tag %q accepted", i+1, tag)
				}
			}
		}
	})
}

// FuzzJoinTokenFile reads arbitrary bytes as a node's --token-file.
// Nothing panics; the token is the file's content without surrounding
// space, and an error never quotes it.
func FuzzJoinTokenFile(f *testing.F) {
	f.Add([]byte("my-join-token-0123456789\n"))
	f.Add([]byte("  \n\t"))
	f.Add([]byte(""))
	f.Add([]byte("two words\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := writePrivate(t, "token", b)
		tok, err := cli.JoinToken("", path)
		want := strings.TrimSpace(string(b))
		if err != nil {
			if want != "" {
				t.Fatalf("token file with %q refused: %v", want, err)
			}
			return
		}
		if tok != want {
			t.Fatalf("token %q, file says %q", tok, want)
		}
	})
}
