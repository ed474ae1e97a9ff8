package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/meshtest"
)

var idleBinDir = flag.String("idle-bindir", "", "BenchmarkSandboxIdle: measure DIR/lattice (and the lattice-sandbox beside it, if any) instead of building this tree's")

// BenchmarkSandboxIdle reports the memory of an idle pod sandbox process,
// started as users do (`lattice sandbox start`): registered, one peer
// connected, proxies up, idle. Goal: ≤ 15 MiB VmRSS.
//
// It builds lattice and lattice-sandbox (static, as `make build` and the
// image do) from this tree. lattice-sandbox is what runs when it lies
// beside lattice (it replaces the process); in-process is lattice alone,
// running the command itself. With -idle-bindir, the binaries in that
// directory instead (another commit's).
//
// The sandbox gives back its start-up pages 5 s in, and again after each
// collection while it idles (internal/pagetrim); what it uses comes
// back as it runs, a page cache folio at a time: the binaries here are
// go build's output, in small folios (a copy made with write() is held
// in large ones, and comes back whole; docs/PERFORMANCE.md). MiB and the
// other metrics are at 150 s, past the runtime's first forced collection
// (at 2 min), which maps the function tables of every goroutine's
// frames; 20s-MiB is VmRSS at 20 s. anon-MiB is
// the process's private memory (heap, stacks), file-MiB the resident
// pages of its executable, which every process running the same binary
// shares; pss-MiB and private-MiB come from /proc/PID/smaps_rollup
// (private: pages no other process maps).
func BenchmarkSandboxIdle(b *testing.B) {
	w := meshtest.Start(b)
	web := w.Peer(b, "web")
	web.ServeHTTP(b, 8080, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
	self, _, token := unprivilegedSetup(b)
	dir := filepath.Dir(self)
	if *idleBinDir != "" {
		bin := filepath.Join(dir, "given", "lattice")
		copyExecutables(b, *idleBinDir, filepath.Dir(bin))
		b.Run("given", func(b *testing.B) { benchIdle(b, w, bin, token, "") })
		return
	}
	withSandbox, alone := filepath.Join(dir, "installed"), filepath.Join(dir, "alone")
	for _, d := range []string{withSandbox, alone} {
		require.NoError(b, os.Mkdir(d, 0o755))
	}
	goBuild(b, filepath.Join(withSandbox, "lattice"), ".", false)
	goBuild(b, filepath.Join(withSandbox, sandboxBinary), "../lattice-sandbox", true)
	copyExecutables(b, withSandbox, alone, "lattice")
	b.Run("lattice-sandbox", func(b *testing.B) {
		benchIdle(b, w, filepath.Join(withSandbox, "lattice"), token, sandboxBinary)
	})
	b.Run("in-process", func(b *testing.B) { benchIdle(b, w, filepath.Join(alone, "lattice"), token, "lattice") })
}

// idleRuns counts benchIdle's sandboxes.
var idleRuns int

// benchIdle runs bin sandbox start, idle, and reports its memory. want,
// if not empty, is the name of the executable the process must be
// running by then.
func benchIdle(b *testing.B, w *meshtest.World, bin, token, want string) {
	var st map[string]string
	var smaps map[string]float64
	var early float64
	for range b.N {
		// Each run registers a new key, so each needs a name of its own.
		idleRuns++
		name := fmt.Sprintf("idle-%d", idleRuns)
		p := startSandboxProc(b, bin, "sandbox", "start", "--name", name, "--server-url", w.NATSURL, "--token-file", token,
			"--state-dir", "mem:", "--socks5", "127.0.0.1:0", "--http-proxy", "127.0.0.1:0", "--listen-addr", "127.0.0.1")
		p.wait(b, `(SOCKS5) on`)
		pid := p.cmd.Process.Pid
		if want != "" {
			exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			require.NoError(b, err)
			require.Equal(b, want, filepath.Base(exe), "the sandbox runs %s", exe)
		}
		time.Sleep(20 * time.Second)
		early = kib(b, procStatus(b, pid)["VmRSS"]) / 1024
		time.Sleep(130 * time.Second)
		st, smaps = procStatus(b, pid), smapsRollup(b, pid)
		p.stop(b)
	}
	b.ReportMetric(kib(b, st["VmRSS"])/1024, "MiB")
	b.ReportMetric(early, "20s-MiB")
	b.ReportMetric(kib(b, st["RssAnon"])/1024, "anon-MiB")
	b.ReportMetric(kib(b, st["RssFile"])/1024, "file-MiB")
	b.ReportMetric(kib(b, st["VmHWM"])/1024, "peak-MiB")
	b.ReportMetric(smaps["Pss"]/1024, "pss-MiB")
	b.ReportMetric((smaps["Private_Clean"]+smaps["Private_Dirty"])/1024, "private-MiB")
}

// goBuild builds pkg (relative to this package) into dst, static
// (CGO_ENABLED=0) if asked.
func goBuild(tb testing.TB, dst, pkg string, static bool) {
	tb.Helper()
	cmd := exec.Command("go", "build", "-o", dst, pkg)
	if static {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	out, err := cmd.CombinedOutput()
	require.NoError(tb, err, "go build %s: %s", pkg, out)
}

// copyExecutables copies the regular files of src named names (every
// one if none are named) into dst, creating it, mode 0755, so that the
// unprivileged user can run them.
func copyExecutables(tb testing.TB, src, dst string, names ...string) {
	tb.Helper()
	require.NoError(tb, os.MkdirAll(dst, 0o755))
	if len(names) == 0 {
		entries, err := os.ReadDir(src)
		require.NoError(tb, err)
		for _, e := range entries {
			if e.Type().IsRegular() {
				names = append(names, e.Name())
			}
		}
	}
	for _, n := range names {
		copyFile(tb, filepath.Join(src, n), filepath.Join(dst, n))
	}
}

// copyFile copies src to dst, mode 0755, with io.Copy: between files
// that is copy_file_range, which, like go build's output and cp, leaves
// the copy's page cache in small folios. A copy written with write()
// (os.WriteFile) is held in large ones, which the kernel maps whole at a
// fault, so the process measured would map more of its binary
// (docs/PERFORMANCE.md).
func copyFile(tb testing.TB, src, dst string) {
	tb.Helper()
	in, err := os.Open(src)
	require.NoError(tb, err)
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	require.NoError(tb, err)
	_, err = io.Copy(out, in)
	require.NoError(tb, errors.Join(err, out.Close()))
}

// smapsRollup returns the kB fields of /proc/PID/smaps_rollup.
func smapsRollup(tb testing.TB, pid int) map[string]float64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	require.NoError(tb, err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(v, " kB") {
			out[k] = kib(tb, strings.TrimSpace(v))
		}
	}
	return out
}

func kib(tb testing.TB, s string) float64 {
	tb.Helper()
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, " kB"), 64)
	if err != nil {
		tb.Fatalf("bad /proc value %q", s)
	}
	return v
}
