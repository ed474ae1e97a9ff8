package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/node"
)

// do carries out one step's action.
func (r *run) do(ctx context.Context, s *scenario.Step) (string, []report.Metric, error) {
	l := r.l
	switch {
	case s.WaitPath != nil:
		a := s.WaitPath
		ctx, cancel := r.within(ctx, a.Within, 10*time.Second)
		defer cancel()
		st, err := l.WaitPath(ctx, a.From, a.To, a.Path)
		if err != nil {
			return "", nil, err
		}
		return pathDetail(st), nil, nil
	case s.AssertPath != nil:
		a := s.AssertPath
		deadline := time.Now().Add(a.For)
		for {
			st, ok, err := l.peerStatus(a.From, a.To)
			switch {
			case err != nil:
				return "", nil, err
			case !ok:
				return "", nil, fmt.Errorf("%s does not know %s", a.From, a.To)
			case string(st.Path) != a.Path:
				return "", nil, fmt.Errorf("path is %s, want %s%s", st.Path, a.Path, whyNot(st, a.Path))
			}
			if !time.Now().Before(deadline) {
				return pathDetail(st), nil, nil
			}
			select {
			case <-ctx.Done():
				return "", nil, context.Cause(ctx)
			case <-time.After(20 * time.Millisecond):
			}
		}
	case s.Ping != nil:
		a := s.Ping
		ctx, cancel := r.within(ctx, a.Within, 10*time.Second)
		defer cancel()
		count := a.Count
		if count == 0 {
			count = 5
		}
		res, err := l.Ping(ctx, a.From, a.To, count)
		if err != nil {
			return "", nil, err
		}
		loss := 1 - float64(res.Received)/float64(res.Sent)
		detail := fmt.Sprintf("%d/%d answered, avg %s", res.Received, res.Sent, fmtDuration(res.AvgRTT))
		metrics := []report.Metric{{Name: "rtt", Value: float64(res.AvgRTT) / 1e6, Unit: "ms"}, {Name: "loss", Value: loss * 100, Unit: "%"}}
		switch {
		case loss > float64(a.MaxLoss):
			return detail, metrics, fmt.Errorf("%s: lost %.0f%%, at most %v allowed", detail, loss*100, a.MaxLoss)
		case a.MaxRTT > 0 && res.AvgRTT > a.MaxRTT:
			return detail, metrics, fmt.Errorf("%s: average round trip above %v", detail, a.MaxRTT)
		}
		return detail, metrics, nil
	case s.Fetch != nil:
		a := s.Fetch
		ctx, cancel := r.within(ctx, a.Within, 10*time.Second)
		defer cancel()
		var body string
		err := retry(ctx, func(ctx context.Context) error {
			status, b, err := l.Fetch(ctx, a.From, a.URL)
			if err != nil {
				return err
			}
			body = b
			return checkBody(status, b, a.Status, a.Contains)
		})
		return fmt.Sprintf("%q", trim(body)), nil, err
	case s.Transfer != nil:
		a := s.Transfer
		ctx, cancel := r.within(ctx, a.Within, 60*time.Second)
		defer cancel()
		d, err := l.Transfer(ctx, a.From, a.To, int64(a.Bytes))
		if err != nil {
			return "", nil, err
		}
		m := throughput(int64(a.Bytes), d)
		detail := fmt.Sprintf("%v in %s, %.0f Mbit/s, SHA-256 ok", a.Bytes, fmtDuration(d), m.Value)
		if min := float64(a.MinThroughput) / 1e6; min > 0 && m.Value < min {
			return detail, []report.Metric{m}, fmt.Errorf("%s: below %s", detail, a.MinThroughput)
		}
		return detail, []report.Metric{m}, nil
	case s.TimeToDirect != nil:
		a := s.TimeToDirect
		ctx, cancel := r.within(ctx, a.Within, 10*time.Second)
		defer cancel()
		d, err := l.TimeToDirect(ctx, a.From, a.To)
		if err != nil {
			return "", nil, err
		}
		m := []report.Metric{{Name: "time_to_direct", Value: float64(d) / 1e6, Unit: "ms"}}
		detail := fmt.Sprintf("direct %s after both were up", fmtDuration(d))
		if a.Max > 0 && d > a.Max {
			return detail, m, fmt.Errorf("%s: more than %v", detail, a.Max)
		}
		return detail, m, nil
	case s.FullMesh != nil:
		a := s.FullMesh
		ctx, cancel := r.within(ctx, a.Within, 60*time.Second)
		defer cancel()
		start := time.Now()
		ms, err := l.WaitMesh(ctx)
		if err != nil {
			return "", nil, err
		}
		took := time.Since(start)
		if a.Ping {
			if err := r.pingAll(ctx); err != nil {
				return "", nil, err
			}
		}
		r.say("%s", strings.TrimRight(indent(l.MeshTable(), "    "), "\n"))
		return fmt.Sprintf("%d nodes, %d pairs connected, %d direct", ms.Nodes, ms.Connected/2, ms.Direct/2),
			[]report.Metric{{Name: "time_to_full_mesh", Value: float64(took) / 1e6, Unit: "ms"}}, nil
	case s.Start != nil, s.Stop != nil, s.Restart != nil:
		return r.lifecycle(ctx, s)
	case s.Move != nil:
		return "", nil, l.Move(ctx, s.Move.Node, s.Move.To)
	case s.LinkDown != nil:
		return "", nil, l.SetLinkDown(s.LinkDown.Link, true)
	case s.LinkUp != nil:
		return "", nil, l.SetLinkDown(s.LinkUp.Link, false)
	case s.Impair != nil:
		return "", nil, l.Impair(s.Impair.Link, s.Impair.Set)
	case s.BlockUDP != nil:
		router, err := l.BlockUDP(*s.BlockUDP, true)
		return router + " drops outbound UDP", nil, err
	case s.UnblockUDP != nil:
		router, err := l.BlockUDP(*s.UnblockUDP, false)
		return router + " has its firewall back", nil, err
	case s.NATReboot != nil:
		router, lost, err := l.RebootNAT(*s.NATReboot)
		return fmt.Sprintf("%s lost %d mappings", router, lost), nil, err
	case s.AdvanceClk != nil:
		l.AdvanceClock(s.AdvanceClk.By)
		return "", nil, nil
	case s.Blackhole != nil:
		return "", nil, l.Blackhole(s.Blackhole.Between[0], s.Blackhole.Between[1], true)
	case s.Heal != nil:
		return "", nil, l.Blackhole(s.Heal.Between[0], s.Heal.Between[1], false)
	case s.Sleep != nil:
		select {
		case <-ctx.Done():
			return "", nil, context.Cause(ctx)
		case <-time.After(*s.Sleep):
			return "", nil, nil
		}
	case s.Join != "":
		b := r.bg[s.Join]
		select {
		case <-b.done:
		case <-ctx.Done():
			return "", nil, context.Cause(ctx)
		}
		delete(r.bg, s.Join)
		r.res.Steps = append(r.res.Steps, b.step)
		if b.step.Status == report.Failed {
			return "", nil, fmt.Errorf("background step %d (%s): %s", b.step.Index, b.step.Label, b.step.Error)
		}
		return b.step.Detail, nil, nil
	case s.Discover != nil:
		return r.discover(ctx, s.Discover)
	case s.SOCKS5Fetch != nil:
		a := s.SOCKS5Fetch
		ctx, cancel := r.within(ctx, a.Within, 10*time.Second)
		defer cancel()
		auth := a.Auth == nil || *a.Auth
		var body string
		err := retry(ctx, func(ctx context.Context) error {
			status, b, err := l.SOCKS5Fetch(ctx, a.Node, a.URL, auth)
			if !auth {
				if err == nil {
					return fmt.Errorf("the proxy served %s without credentials (status %d)", a.URL, status)
				}
				body = "refused: " + err.Error()
				return nil
			}
			if err != nil {
				return err
			}
			body = b
			return checkBody(status, b, a.Status, a.Contains)
		})
		return fmt.Sprintf("%q", trim(body)), nil, err
	case s.Egress != nil:
		a := s.Egress
		ctx, cancel := r.within(ctx, 0, 10*time.Second)
		defer cancel()
		allowed, detail, err := l.Egress(ctx, a.Node, a.To)
		if err != nil {
			return "", nil, err
		}
		if got := map[bool]string{true: "allowed", false: "denied"}[allowed]; got != a.Expect {
			return detail, nil, fmt.Errorf("%s was %s, want %s: %s", a.To, got, a.Expect, detail)
		}
		return detail, nil, nil
	case s.Forward != nil:
		a := s.Forward
		ctx, cancel := r.within(ctx, a.Within, 10*time.Second)
		defer cancel()
		var body string
		err := retry(ctx, func(ctx context.Context) error {
			status, b, err := l.Forward(ctx, a.Node, a.Port, a.From)
			if err != nil {
				return err
			}
			body = b
			return checkBody(status, b, 200, "hello from "+a.Node+"'s host")
		})
		return fmt.Sprintf("%q", trim(body)), nil, err
	case s.AgentRun != nil:
		a := s.AgentRun
		ctx, cancel := r.within(ctx, a.Within, 60*time.Second)
		defer cancel()
		start := time.Now()
		res, err := l.AgentRun(ctx, a.Node, a.Argv)
		if err != nil {
			return "", nil, err
		}
		took := time.Since(start)
		detail := fmt.Sprintf("exit %d", res.Code)
		if out := strings.TrimSpace(res.Stdout); out != "" {
			detail += fmt.Sprintf(", printed %q", trim(out))
		}
		m := []report.Metric{{Name: "agent_run", Value: float64(took) / 1e6, Unit: "ms"}}
		switch {
		case res.Code != a.ExitCode:
			return detail, m, fmt.Errorf("%s, want exit %d%s", detail, a.ExitCode, stderrNote(res.Stderr))
		case !strings.Contains(res.Stdout, a.StdoutContains):
			return detail, m, fmt.Errorf("%s: its output lacks %q%s", detail, a.StdoutContains, stderrNote(res.Stderr))
		}
		return detail, m, nil
	}
	return "", nil, errors.New("step has no action")
}

// stderrNote quotes what an agent wrote to stderr, if anything.
func stderrNote(s string) string {
	if s = strings.TrimSpace(s); s != "" {
		return fmt.Sprintf("; it wrote to stderr: %q", trim(s))
	}
	return ""
}

func pathDetail(st node.PeerStatus) string {
	if st.Path == node.PathDirect {
		return "direct to " + st.Endpoint
	}
	if st.ICE.Err != "" {
		return "relay (ICE: " + st.ICE.Err + ")"
	}
	if n := len(st.History); n > 0 {
		return "relay (" + st.History[n-1].Reason + ")"
	}
	return "relay"
}

// lifecycle starts, stops or restarts a node (or a count of them) or a
// service.
func (r *run) lifecycle(ctx context.Context, s *scenario.Step) (string, []report.Metric, error) {
	t, action := s.Start, "start"
	if s.Stop != nil {
		t, action = s.Stop, "stop"
	}
	if s.Restart != nil {
		t, action = s.Restart, "restart"
	}
	l := r.l
	if t.Service != "" {
		if action != "start" {
			if err := l.StopService(t.Service); err != nil {
				return "", nil, err
			}
		}
		if action != "stop" {
			return "", nil, l.StartService(ctx, t.Service)
		}
		return "", nil, nil
	}
	var names []string
	for _, n := range l.plan.Group(t.Node) {
		names = append(names, n.Name)
	}
	var ids []string
	if action != "start" {
		for _, name := range names {
			if rn, err := l.node(name); err == nil {
				ids = append(ids, rn.nodeID())
			}
			if err := l.StopNode(name); err != nil {
				return "", nil, err
			}
		}
	}
	if action == "stop" {
		return "", nil, nil
	}
	if err := l.StartNodes(ctx, names...); err != nil {
		return "", nil, err
	}
	if action == "restart" && len(names) == 1 {
		rn, err := l.node(names[0])
		if err != nil {
			return "", nil, err
		}
		if id := rn.nodeID(); len(ids) == 1 && id != ids[0] {
			return "", nil, fmt.Errorf("%s came back as %s, was %s", names[0], id, ids[0])
		}
		return fmt.Sprintf("same identity %s, %v", rn.nodeID(), rn.addr()), nil, nil
	}
	return "", nil, nil
}

// discover classifies a node's NATs and compares with the plan.
func (r *run) discover(ctx context.Context, a *scenario.Discover) (string, []report.Metric, error) {
	ctx, cancel := r.within(ctx, 0, 20*time.Second)
	defer cancel()
	res, err := r.l.DiscoverNAT(ctx, a.Node, a.STUN)
	if err != nil {
		return "", nil, err
	}
	m, f, natted := r.l.ExpectedNAT(a.Node)
	if a.Mapping != "" {
		m, _ = nat.ParseMapping(a.Mapping)
	}
	if a.Filtering != "" {
		f, _ = nat.ParseFiltering(a.Filtering)
	}
	detail := res.String()
	if res.NATed != natted || (natted && (res.Mapping.String() != m.String() || res.Filtering.String() != f.String())) {
		want := fmt.Sprintf("%s mapping, %s filtering", m, f)
		if !natted {
			want = "no NAT"
		}
		return detail, nil, fmt.Errorf("discovered %s, want %s", detail, want)
	}
	return detail + " (as configured)", nil, nil
}

// pingAll pings every ordered pair of running nodes once.
func (r *run) pingAll(ctx context.Context) error {
	names := r.l.Running()
	for _, a := range names {
		for _, b := range names {
			if a == b {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := r.l.Ping(pctx, a, b, 1)
			cancel()
			if err != nil {
				return fmt.Errorf("ping %s → %s: %w", a, b, err)
			}
		}
	}
	return nil
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + line + "\n")
	}
	return b.String()
}
