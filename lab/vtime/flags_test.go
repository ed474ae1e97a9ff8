package vtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFlagsScriptConcurrent runs scripts/vtime-flags.sh eight times at once
// against one empty TMPDIR, as parallel `go test` runs do: every run must
// print the same flags, and what they name must be complete (each overlay
// file present, the go.mod copy carrying its replaces), with no temp dirs
// left behind. A script that wrote its files in place would let a run print
// flags naming files another run had not finished.
func TestFlagsScriptConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs go list eight times")
	}
	script, err := filepath.Abs("../../scripts/vtime-flags.sh")
	require.NoError(t, err)
	tmp := t.TempDir()
	const n = 8
	outs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			cmd := exec.Command("sh", script)
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "GOFLAGS=")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			outs[i] = strings.TrimSpace(string(out))
			if err != nil {
				errs[i] = fmt.Errorf("%w: %s", err, stderr.String())
				return
			}
			// Checked as soon as this run returns, while the others
			// may still be writing.
			errs[i] = checkFlags(outs[i])
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "run %d", i)
		require.Equal(t, outs[0], outs[i], "run %d printed other flags", i)
	}

	overlay := ""
	for f := range strings.FieldsSeq(outs[0]) {
		if v, ok := strings.CutPrefix(f, "-overlay="); ok {
			overlay = v
		}
	}
	require.NotEmpty(t, overlay, "flags: %s", outs[0])
	matches, err := filepath.Glob(filepath.Join(tmp, "lattice-vtime-*", ".*"))
	require.NoError(t, err)
	inner, err := filepath.Glob(filepath.Join(filepath.Dir(overlay), ".*"))
	require.NoError(t, err)
	assert.Empty(t, append(matches, inner...), "temp dirs left behind")
}

// checkFlags reports what is missing from the files the flags name.
func checkFlags(flags string) error {
	var modfile, overlay string
	for f := range strings.FieldsSeq(flags) {
		if v, ok := strings.CutPrefix(f, "-modfile="); ok {
			modfile = v
		} else if v, ok := strings.CutPrefix(f, "-overlay="); ok {
			overlay = v
		}
	}
	if modfile == "" || overlay == "" {
		return fmt.Errorf("flags %q lack -modfile or -overlay", flags)
	}
	gomod, err := os.ReadFile(modfile)
	if err != nil {
		return err
	}
	if want := "replace gvisor.dev/gvisor => " + filepath.Dir(overlay) + "/gvisor\n"; !strings.Contains(string(gomod), want) {
		return fmt.Errorf("%s lacks %q", modfile, want)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(modfile), "go.sum")); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(overlay), "gvisor", "go.mod")); err != nil {
		return fmt.Errorf("gvisor symlink: %w", err)
	}
	raw, err := os.ReadFile(overlay)
	if err != nil {
		return err
	}
	var ov struct{ Replace map[string]string }
	if err := json.Unmarshal(raw, &ov); err != nil {
		return fmt.Errorf("overlay.json: %w: %s", err, raw)
	}
	if len(ov.Replace) == 0 {
		return errors.New("overlay.json replaces nothing")
	}
	for orig, repl := range ov.Replace {
		fi, err := os.Stat(repl)
		if err != nil {
			return fmt.Errorf("overlay file for %s: %w", orig, err)
		}
		if fi.Size() == 0 {
			return fmt.Errorf("overlay file %s is empty", repl)
		}
	}
	return nil
}
