package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/latticelab/lattice/internal/edition"
)

// MaxExecOutput bounds what POST /run keeps of each of the agent's output
// streams: the last 64 KiB, since an agent's last words say how it ended.
const MaxExecOutput = 64 << 10

// maxExecRequest bounds a POST /run body: the command line and its stdin.
const maxExecRequest = 1 << 20

// ExecRequest is what POST /run runs: Argv as the sandbox's agent (in
// gvisor mode as PID 1 in runsc, in pod mode as a process with the
// proxies in its environment), reading Stdin.
type ExecRequest struct {
	Argv  []string `json:"argv"`
	Stdin string   `json:"stdin,omitempty"`
}

// ExecResult is what the agent did. Stdout and Stderr hold the last
// MaxExecOutput bytes of each stream; the Truncated flags say whether
// anything came before. Error says what kept the command from running or
// finishing (then Code is -1 unless it had exited).
type ExecResult struct {
	Code            int           `json:"code"`
	Stdout          string        `json:"stdout"`
	Stderr          string        `json:"stderr"`
	StdoutTruncated bool          `json:"stdout_truncated,omitempty"`
	StderrTruncated bool          `json:"stderr_truncated,omitempty"`
	Error           string        `json:"error,omitempty"`
	Time            time.Duration `json:"time"`
}

// ParseExecRequest reads a POST /run body: a JSON object with a non-empty
// argv, no unknown fields, and no NUL bytes in any argument.
func ParseExecRequest(data []byte) (ExecRequest, error) {
	var req ExecRequest
	if len(data) > maxExecRequest {
		return req, fmt.Errorf("run request: over the limit of %d bytes", maxExecRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return ExecRequest{}, fmt.Errorf(`run request: want {"argv": ["CMD", "ARG", ...], "stdin": "..."}: %w`, err)
	}
	if dec.More() {
		return ExecRequest{}, errors.New("run request: more than one JSON value")
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return ExecRequest{}, errors.New("run request: argv: no command")
	}
	for i, a := range req.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return ExecRequest{}, fmt.Errorf("run request: argv[%d]: contains a NUL byte", i)
		}
	}
	return req, nil
}

// runHandler serves POST /run for r. One agent runs at a time: in gvisor
// mode a sandbox has one container; a request waits for the one before it
// (or until its client gives up).
func runHandler(r Runner) http.HandlerFunc {
	turn := make(chan struct{}, 1)
	return func(w http.ResponseWriter, hr *http.Request) {
		if err := edition.Require("sandbox exec"); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		data, err := io.ReadAll(io.LimitReader(hr.Body, maxExecRequest+1))
		if err != nil {
			http.Error(w, "run request: "+err.Error(), http.StatusBadRequest)
			return
		}
		req, err := ParseExecRequest(data)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case turn <- struct{}{}:
		case <-hr.Context().Done():
			return
		}
		defer func() { <-turn }()
		stdout, stderr := &tailBuffer{max: MaxExecOutput}, &tailBuffer{max: MaxExecOutput}
		start := time.Now()
		code, err := r.Run(hr.Context(), req.Argv, Stdio{Stdin: strings.NewReader(req.Stdin), Stdout: stdout, Stderr: stderr})
		res := ExecResult{Code: code, Time: time.Since(start)}
		res.Stdout, res.StdoutTruncated = stdout.tail()
		res.Stderr, res.StderrTruncated = stderr.tail()
		if err != nil {
			res.Error = err.Error()
		}
		writeJSON(w, res)
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int

	mu  sync.Mutex // guards the following fields
	buf []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) > t.max {
		p, t.cut = p[len(p)-t.max:], true
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	return n, nil
}

// tail returns what is kept and whether anything was dropped before it.
func (t *tailBuffer) tail() (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf), t.cut
}
