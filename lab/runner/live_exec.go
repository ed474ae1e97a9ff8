package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"github.com/latticelab/lattice/internal/netns"
	"github.com/latticelab/lattice/lab/scenario"
)

// Exec implements scenario.ExecEnv: argv runs in the kernel host's network
// namespace (forked from a thread that joined it, so the program and
// everything it starts live there), is killed when ctx ends, and its
// output is kept up to scenario.MaxExecOutput bytes a stream.
func (l *Lab) Exec(ctx context.Context, host string, argv []string) (scenario.ExecResult, error) {
	k := l.f.KernelHost(host)
	if k == nil {
		return scenario.ExecResult{}, fmt.Errorf("exec: %s is not a kernel host", host)
	}
	if len(argv) == 0 {
		return scenario.ExecResult{}, errors.New("exec: no program")
	}
	var stdout, stderr capBuffer
	stdout.max, stderr.max = scenario.MaxExecOutput, scenario.MaxExecOutput
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Its own process group, so the kill on ctx reaches what it started.
	killGroupOnCancel(cmd)
	cmd.WaitDelay = time.Second
	if err := StartInNetns(k.NetnsPath(), cmd); err != nil {
		return scenario.ExecResult{}, fmt.Errorf("exec on %s: %w", host, err)
	}
	err := cmd.Wait()
	res := scenario.ExecResult{ExitCode: cmd.ProcessState.ExitCode(), Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) {
		return res, fmt.Errorf("exec on %s: %w", host, err)
	}
	return res, nil
}

// StartInNetns starts cmd in the network namespace at path (/run/netns/NAME).
func StartInNetns(path string, cmd *exec.Cmd) error {
	return netns.Do(path, cmd.Start)
}

// capBuffer keeps the first max bytes written to it and drops the rest,
// so a chatty program cannot fill the lab's memory.
type capBuffer struct {
	bytes.Buffer
	max int
}

func (b *capBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
