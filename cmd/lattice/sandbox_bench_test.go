package main

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latticelab/lattice/meshtest"
)

// BenchmarkSandboxIdle reports the resident memory (VmRSS) of an idle pod
// sandbox process: registered, one peer connected, proxies up, after it
// has sat idle for a few seconds. Goal: ≤ 15 MiB.
//
// It also splits VmRSS: anon-MiB is the process's private memory (heap,
// stacks), file-MiB the resident pages of its executable, which every
// process running the same binary shares with it.
func BenchmarkSandboxIdle(b *testing.B) {
	w := meshtest.Start(b)
	web := w.Peer(b, "web")
	web.ServeHTTP(b, 8080, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
	self, _, token := unprivilegedSetup(b)
	var rss, anon, file, peak float64
	for range b.N {
		p := startSandboxProc(b, self, "sandbox", "start", "--name", "idle", "--server-url", w.NATSURL, "--token-file", token,
			"--state-dir", "mem:", "--socks5", "127.0.0.1:0", "--http-proxy", "127.0.0.1:0", "--listen-addr", "127.0.0.1")
		p.wait(b, `(SOCKS5) on`)
		time.Sleep(5 * time.Second) // handshakes done, then idle
		st := procStatus(b, p.cmd.Process.Pid)
		rss, peak = kib(b, st["VmRSS"])/1024, kib(b, st["VmHWM"])/1024
		anon, file = kib(b, st["RssAnon"])/1024, kib(b, st["RssFile"])/1024
		p.stop(b)
	}
	b.ReportMetric(rss, "MiB")
	b.ReportMetric(anon, "anon-MiB")
	b.ReportMetric(file, "file-MiB")
	b.ReportMetric(peak, "peak-MiB")
}

func kib(tb testing.TB, s string) float64 {
	tb.Helper()
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, " kB"), 64)
	if err != nil {
		tb.Fatalf("bad /proc status value %q", s)
	}
	return v
}
