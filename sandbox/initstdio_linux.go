package sandbox

import (
	"io"
	"os"
	"sync"
	"time"
)

// agentStdio is the agent's stdin, stdout and stderr as files the init can
// be sent: a Stdio's *os.File as it is, /dev/null for nil, and for any
// other reader or writer a pipe that a goroutine copies through, as
// os/exec does.
type agentStdio struct {
	files [3]*os.File // the agent's ends

	toClose []*os.File    // of files, what this sandbox opened
	ours    []*os.File    // the pipes' other ends
	input   chan struct{} // closed when stdin's copy ends
	outputs sync.WaitGroup
}

func openAgentStdio(s Stdio) (*agentStdio, error) {
	a := &agentStdio{input: make(chan struct{})}
	var err error
	if a.files[0], err = a.openInput(s.Stdin); err != nil {
		a.close()
		return nil, err
	}
	if a.files[1], err = a.openOutput(s.Stdout); err != nil {
		a.close()
		return nil, err
	}
	if s.Stderr != nil && s.Stderr == s.Stdout {
		a.files[2] = a.files[1] // one pipe keeps their order
	} else if a.files[2], err = a.openOutput(s.Stderr); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

func (a *agentStdio) openInput(r io.Reader) (*os.File, error) {
	if f, ok := r.(*os.File); ok {
		close(a.input)
		return f, nil
	}
	if r == nil {
		close(a.input)
		f, err := os.Open(os.DevNull)
		if err == nil {
			a.toClose = append(a.toClose, f)
		}
		return f, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		close(a.input)
		return nil, err
	}
	a.toClose, a.ours = append(a.toClose, pr), append(a.ours, pw)
	go func() {
		defer close(a.input)
		_, _ = io.Copy(pw, r)
		pw.Close()
	}()
	return pr, nil
}

func (a *agentStdio) openOutput(w io.Writer) (*os.File, error) {
	if f, ok := w.(*os.File); ok {
		return f, nil
	}
	if w == nil {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err == nil {
			a.toClose = append(a.toClose, f)
		}
		return f, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	a.toClose, a.ours = append(a.toClose, pw), append(a.ours, pr)
	a.outputs.Go(func() {
		_, _ = io.Copy(w, pr)
	})
	return pw, nil
}

// sent drops the sandbox's copies of the agent's ends, once the init holds
// them: the agent's output then ends when the last process in its PID
// namespace has gone.
func (a *agentStdio) sent() {
	for _, f := range a.toClose {
		f.Close()
	}
	a.toClose = nil
}

// finish waits, after the init has exited, for the copies to end, as long
// as grace at most (like exec.Cmd's WaitDelay), then closes the pipes
// under them. As with os/exec, a copy blocked reading the caller's
// Stdin (not a file) ends only when that read returns.
func (a *agentStdio) finish(grace time.Duration) {
	a.sent()
	outputs := make(chan struct{})
	go func() {
		a.outputs.Wait()
		close(outputs)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	for _, c := range []chan struct{}{outputs, a.input} {
		select {
		case <-c:
		case <-t.C:
			a.close()
			<-outputs
			return
		}
	}
	a.close()
}

func (a *agentStdio) close() {
	a.sent()
	for _, f := range a.ours {
		f.Close()
	}
	a.ours = nil
}
