package runner

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/pcapng"
	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/scenario"
)

// liveState is what ParseStep needs to know of the lab now.
func (s *LiveServer) liveState() scenario.LiveState {
	l := s.l
	st := scenario.LiveState{Running: l.Running(), Location: map[string]string{}}
	l.mu.Lock()
	for _, name := range l.serviceNames() {
		if l.services[name] == nil {
			st.Stopped = append(st.Stopped, name)
		}
	}
	for router, fw := range l.fw {
		if fw.blockUDP {
			st.Blocked = append(st.Blocked, router)
		}
		for key := range fw.holes {
			if a, b, ok := strings.Cut(key, "|"); ok {
				st.Holes = append(st.Holes, [2]string{a, b})
			}
		}
	}
	l.mu.Unlock()
	s.mu.Lock()
	for n, net := range s.location {
		st.Location[n] = net
	}
	s.mu.Unlock()
	return st
}

// do parses one step against the lab as it is and runs it.
func (s *LiveServer) do(text string) LiveResponse {
	s.stepMu.Lock()
	defer s.stepMu.Unlock()
	step, err := scenario.ParseStep("do", []byte(text), s.l.plan, s.liveState())
	if err != nil {
		var es *strictyaml.Errors
		if errors.As(err, &es) {
			lines := make([]string, 0, len(es.List))
			for _, e := range es.List {
				lines = append(lines, e.Error())
			}
			return LiveResponse{Error: strings.Join(lines, "\n"), Invalid: true}
		}
		return LiveResponse{Error: err.Error(), Invalid: true}
	}
	action, a := step.Action()
	var lines []string
	var mu sync.Mutex
	r := &run{l: s.l, res: &report.Result{}, bg: map[string]*background{}, slow: 1,
		progress: func(line string) {
			mu.Lock()
			lines = append(lines, line)
			mu.Unlock()
		}}
	label := step.Name
	if label == "" {
		label = a.Describe()
	}
	r.say("%s", label)
	res := r.exec(s.ctx, a, report.Step{Index: 1, Action: action, Label: label, Started: s.l.Since()})
	mu.Lock()
	defer mu.Unlock()
	if res.Status == report.Failed {
		return LiveResponse{Error: fmt.Sprintf("%s: %s", label, res.Error), Lines: lines}
	}
	if m, ok := a.(*scenario.Move); ok {
		s.mu.Lock()
		s.location[m.Node] = m.To
		s.mu.Unlock()
	}
	detail := label
	if res.Detail != "" {
		detail += ": " + res.Detail
	}
	return LiveResponse{Detail: detail + " (" + scenario.FormatDuration(res.Duration) + ")", Lines: lines}
}

// captureTarget resolves a network or host name to what to tap.
func (s *LiveServer) captureTarget(name string) (start func(*pcapng.Writer) error, stop func(), err error) {
	f := s.l.f
	if n := f.Network(name); n != nil {
		return n.Capture, n.StopCapture, nil
	}
	var ifcs []*fabric.Interface
	switch {
	case f.KernelHost(name) != nil:
		ifcs = []*fabric.Interface{f.KernelHost(name).Interface()}
	case f.Host(name) != nil:
		ifcs = f.Host(name).FabricInterfaces()
	case f.Router(name) != nil:
		ifcs = f.Router(name).Interfaces()
	default:
		var names []string
		for _, n := range s.l.plan.Networks {
			names = append(names, n.Config.Name)
		}
		for _, h := range s.l.plan.Hosts {
			names = append(names, h.Config.Name)
		}
		hint := ""
		if sug := strictyaml.Suggest(name, names); sug != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", sug)
		}
		return nil, nil, fmt.Errorf("no network or host %q%s", name, hint)
	}
	start = func(w *pcapng.Writer) error {
		for _, ifc := range ifcs {
			if err := ifc.CaptureInterface(w); err != nil {
				return err
			}
		}
		return nil
	}
	stop = func() {
		for _, ifc := range ifcs {
			ifc.StopCapture()
		}
	}
	return start, stop, nil
}

// captureFlush is how often a live capture pushes packets to its client:
// often enough that tshark shows them as they happen.
const captureFlush = 100 * time.Millisecond

// capture streams pcapng of a network or a host's interfaces to c until
// the client hangs up or the server closes.
func (s *LiveServer) capture(c net.Conn, target string) {
	start, stop, err := s.captureTarget(target)
	if err != nil {
		s.reply(c, LiveResponse{Error: "capture: " + err.Error(), Invalid: true})
		return
	}
	s.mu.Lock()
	busy := s.captured[target]
	s.captured[target] = true
	s.mu.Unlock()
	if busy {
		s.reply(c, LiveResponse{Error: fmt.Sprintf("capture: %s is being captured by another client", target)})
		return
	}
	defer func() {
		s.mu.Lock()
		delete(s.captured, target)
		s.mu.Unlock()
	}()
	s.reply(c, LiveResponse{Detail: "capturing " + target})
	w, err := pcapng.NewWriter(c, pcapng.Options{Comment: fmt.Sprintf("lattice-lab live capture, topology %s: %s", s.l.plan.Name, target)})
	if err != nil {
		return
	}
	if err := start(w); err != nil {
		stop()
		_ = w.Close()
		return
	}
	defer func() {
		stop()
		_ = w.Close()
	}()
	// The client sends nothing more: a read returns when it hangs up.
	gone := make(chan struct{})
	s.wg.Go(func() {
		defer close(gone)
		var b [1]byte
		_, _ = c.Read(b[:])
	})
	tick := time.NewTicker(captureFlush)
	defer tick.Stop()
	for {
		select {
		case <-gone:
			return
		case <-s.ctx.Done():
			return
		case <-tick.C:
			_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}
