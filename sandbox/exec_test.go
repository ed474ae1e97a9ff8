package sandbox_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/sandbox"
)

// fakeAgent is a sandbox whose agent is a Go function.
type fakeAgent struct {
	mode sandbox.Mode
	run  func(ctx context.Context, argv []string, stdio sandbox.Stdio) (int, error)
}

func (f *fakeAgent) Status() sandbox.Status { return sandbox.Status{Name: "agent", Mode: f.mode} }

func (f *fakeAgent) Run(ctx context.Context, argv []string, stdio sandbox.Stdio) (int, error) {
	return f.run(ctx, argv, stdio)
}

// statusOnly serves nothing but its status, as gvisor mode does for dial
// and resolve.
type statusOnly struct{}

func (statusOnly) Status() sandbox.Status {
	return sandbox.Status{Name: "agent", Mode: sandbox.ModeGVisor}
}

// serve serves api on a socket in a temporary directory and returns a
// client for it.
func serve(t *testing.T, api sandbox.API) *sandbox.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), sandbox.SocketName)
	stop, err := sandbox.ServeAPI(sock, api)
	require.NoError(t, err)
	c := sandbox.NewClient(sock)
	t.Cleanup(func() {
		c.Close()
		stop()
	})
	return c
}

// TestAPIUnsupported: an endpoint the sandbox's mode lacks answers with an
// error that names it and the mode; status still works.
func TestAPIUnsupported(t *testing.T) {
	c := serve(t, statusOnly{})
	st, err := c.Status(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "agent", st.Name)
	_, err = c.Dial(t.Context(), "tcp", "web:80")
	assert.EqualError(t, err, "sandbox: sandbox: POST /dial is not served in gvisor mode")
	_, err = c.Resolve(t.Context(), "web")
	assert.EqualError(t, err, "sandbox: sandbox: GET /resolve is not served in gvisor mode")
	_, err = c.Run(t.Context(), sandbox.ExecRequest{Argv: []string{"true"}})
	assert.EqualError(t, err, "sandbox: sandbox: POST /run is not served in gvisor mode")
}

func TestParseExecRequest(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       sandbox.ExecRequest
		wantErr    string
	}{
		{"argv", `{"argv":["sh","-c","echo hi"]}`, sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo hi"}}, ""},
		{"stdin", `{"argv":["cat"],"stdin":"x\n"}`, sandbox.ExecRequest{Argv: []string{"cat"}, Stdin: "x\n"}, ""},
		{"no argv", `{}`, sandbox.ExecRequest{}, "run request: argv: no command"},
		{"empty command", `{"argv":[""]}`, sandbox.ExecRequest{}, "run request: argv: no command"},
		{"nul", `{"argv":["echo","a\u0000b"]}`, sandbox.ExecRequest{}, "run request: argv[1]: contains a NUL byte"},
		{"bare array", `["echo"]`, sandbox.ExecRequest{}, `run request: want {"argv": ["CMD", "ARG", ...], "stdin": "..."}: json: cannot unmarshal array into Go value of type sandbox.ExecRequest`},
		{"unknown field", `{"argv":["true"],"env":[]}`, sandbox.ExecRequest{}, `run request: want {"argv": ["CMD", "ARG", ...], "stdin": "..."}: json: unknown field "env"`},
		{"two values", `{"argv":["true"]}{}`, sandbox.ExecRequest{}, "run request: more than one JSON value"},
		{"too big", `{"argv":["x"],"stdin":"` + strings.Repeat("a", 1<<20) + `"}`, sandbox.ExecRequest{}, "run request: over the limit of 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sandbox.ParseExecRequest([]byte(tc.body))
			if tc.wantErr != "" {
				assert.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// FuzzParseExecRequest: any body is a request with a command, or an error
// that says it is a bad run request; never a panic.
func FuzzParseExecRequest(f *testing.F) {
	for _, s := range []string{`{"argv":["sh","-c","echo hi"]}`, `{"argv":["cat"],"stdin":"x"}`, `{}`, `[]`, `{"argv":[""]}`, `null`, `{"argv":["a\u0000"]}`, `{"argv":["x"]} 1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := sandbox.ParseExecRequest(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "run request: ") {
				t.Fatalf("error does not say it is about the run request: %v", err)
			}
			return
		}
		if len(req.Argv) == 0 || req.Argv[0] == "" {
			t.Fatalf("accepted %q without a command", data)
		}
	})
}
