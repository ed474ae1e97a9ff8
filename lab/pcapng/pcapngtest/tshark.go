// Package pcapngtest helps tests check captures with tshark, Wireshark's
// command-line reader: if tshark decodes a file the way a test expects, so
// will the person who opens it in Wireshark.
package pcapngtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Tshark is a tshark binary found on PATH.
type Tshark struct {
	path string
}

// Require returns tshark. A missing tshark fails the test: the interop check
// is the only proof Wireshark reads our files, so it must not vanish
// silently. LATTICE_NO_TSHARK=1 turns the failure into a skip.
func Require(t testing.TB) *Tshark {
	t.Helper()
	path, err := exec.LookPath("tshark")
	if err == nil {
		return &Tshark{path: path}
	}
	const msg = "tshark not found: run 'make deps' (apt-get install tshark)"
	if os.Getenv("LATTICE_NO_TSHARK") == "1" {
		t.Skip(msg)
	}
	t.Fatal(msg)
	return nil
}

// Run runs tshark with args and returns its standard output. HOME points at
// an empty directory so personal preferences cannot change the output.
func (ts *Tshark) Run(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, ts.path, args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// CommentField returns the name this tshark gives packet comments:
// frame.comment since 3.6, pkt_comment before. Asking for a field tshark
// does not know is an error, so look it up.
func (ts *Tshark) CommentField(t testing.TB) string {
	t.Helper()
	fields := ts.Run(t, "-G", "fields")
	for _, name := range []string{"frame.comment", "pkt_comment"} {
		if strings.Contains(fields, "\t"+name+"\t") {
			return name
		}
	}
	t.Fatal("tshark knows neither frame.comment nor pkt_comment")
	return ""
}
