//go:build pro

package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/sandbox"
)

// TestRun: POST /run runs the command as the agent with its stdin and
// returns its exit code and output, the last MaxExecOutput bytes of each
// stream; an agent that cannot run is an error that says why.
func TestRun(t *testing.T) {
	big := strings.Repeat("x", sandbox.MaxExecOutput)
	c := serve(t, &fakeAgent{mode: sandbox.ModePod, run: func(ctx context.Context, argv []string, stdio sandbox.Stdio) (int, error) {
		switch argv[0] {
		case "missing":
			return -1, errors.New(`sandbox: agent "missing": executable file not found in $PATH`)
		case "chatty":
			stdio.Stdout.Write([]byte("first words\n"))
			stdio.Stdout.Write([]byte(big))
			stdio.Stderr.Write([]byte("last words\n"))
			return 0, nil
		}
		return echoArgs(ctx, argv, stdio)
	}})
	ctx := t.Context()
	res, err := c.Run(ctx, sandbox.ExecRequest{Argv: []string{"echo", "a b", "c"}, Stdin: "in"})
	require.NoError(t, err)
	assert.Equal(t, 3, res.Code)
	assert.Equal(t, "echo a b c|in", res.Stdout)
	assert.Empty(t, res.Stderr)
	assert.False(t, res.StdoutTruncated)

	res, err = c.Run(ctx, sandbox.ExecRequest{Argv: []string{"chatty"}})
	require.NoError(t, err)
	assert.Equal(t, big, res.Stdout, "the tail is kept, the first words dropped")
	assert.True(t, res.StdoutTruncated)
	assert.Equal(t, "last words\n", res.Stderr)
	assert.False(t, res.StderrTruncated)

	res, err = c.Run(ctx, sandbox.ExecRequest{Argv: []string{"missing"}})
	assert.EqualError(t, err, `sandbox: agent "missing": executable file not found in $PATH`)
	assert.Equal(t, -1, res.Code)

	_, err = c.Run(ctx, sandbox.ExecRequest{})
	assert.EqualError(t, err, "sandbox: run request: argv: no command")
}

// TestRunOneAtATime: runs on one sandbox never overlap; the second waits
// for the first.
func TestRunOneAtATime(t *testing.T) {
	var running, most atomic.Int32
	c := serve(t, &fakeAgent{mode: sandbox.ModeGVisor, run: func(ctx context.Context, argv []string, stdio sandbox.Stdio) (int, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond) // long enough for the others to arrive and wait
		return 0, nil
	}})
	for _, err := range runConcurrently(c, t.Context(), 4) {
		require.NoError(t, err)
	}
	assert.Equal(t, int32(1), most.Load())
}

// TestRunCancel: a client giving up stops the agent: its context ends.
func TestRunCancel(t *testing.T) {
	started, stopped := make(chan struct{}), make(chan error, 1)
	c := serve(t, &fakeAgent{mode: sandbox.ModeGVisor, run: func(ctx context.Context, argv []string, stdio sandbox.Stdio) (int, error) {
		close(started)
		<-ctx.Done()
		stopped <- ctx.Err()
		return -1, ctx.Err()
	}})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-started
		cancel()
	}()
	_, err := c.Run(ctx, sandbox.ExecRequest{Argv: []string{"sleep", "forever"}})
	require.ErrorIs(t, err, context.Canceled)
	select {
	case err := <-stopped:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's context did not end when the client gave up")
	}
}

// TestDaemonPodExec: a pod sandbox's daemon serves its control socket in
// the state dir, and a command run through it is the sandbox's agent (its
// identity and proxies in the environment); Close removes the socket.
func TestDaemonPodExec(t *testing.T) {
	m := newMesh(t)
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cfg := m.config(t, "agent", state)
	cfg.Isolation = sandbox.IsolationProxy
	dm, err := sandbox.StartDaemon(ctx, sandbox.ModePod, cfg)
	require.NoError(t, err)
	defer dm.Close()
	c := sandbox.NewClient(dm.Socket())
	defer c.Close()
	res, err := c.Run(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", `echo "$LATTICE_SANDBOX $LATTICE_ADDRESS"; test -n "$ALL_PROXY"; cat`}, Stdin: "piped"})
	require.NoError(t, err)
	assert.Equal(t, 0, res.Code, "stderr: %s", res.Stderr)
	addr := dm.Driver().Status().Address.Addr().String()
	assert.Equal(t, "agent "+addr+"\npiped", res.Stdout)
	r, err := c.Resolve(ctx, "web")
	require.NoError(t, err)
	assert.Equal(t, m.web.Node.Address().Addr(), r.Addr)

	require.NoError(t, dm.Close())
	_, err = c.Status(ctx)
	assert.ErrorContains(t, err, "sandbox not reachable")
}

// echoArgs is an agent that prints its command line and stdin and exits
// with len(argv).
func echoArgs(_ context.Context, argv []string, stdio sandbox.Stdio) (int, error) {
	in, _ := io.ReadAll(stdio.Stdin)
	fmt.Fprintf(stdio.Stdout, "%s|%s", strings.Join(argv, " "), in)
	return len(argv), nil
}

// runConcurrently makes n runs at once and returns their errors.
func runConcurrently(c *sandbox.Client, ctx context.Context, n int) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = c.Run(ctx, sandbox.ExecRequest{Argv: []string{"x"}}) })
	}
	wg.Wait()
	return errs
}
