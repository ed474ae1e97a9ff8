package node_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/node"
)

// refusals is a slog.Handler that keeps the errors of "signal refused"
// records.
type refusals struct {
	mu   *sync.Mutex
	errs *[]string
}

func newRefusals() refusals { return refusals{mu: &sync.Mutex{}, errs: &[]string{}} }

func (r refusals) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelDebug }
func (r refusals) WithAttrs([]slog.Attr) slog.Handler           { return r }
func (r refusals) WithGroup(string) slog.Handler                { return r }
func (r refusals) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "signal refused" {
		return nil
	}
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			r.mu.Lock()
			*r.errs = append(*r.errs, a.Value.String())
			r.mu.Unlock()
		}
		return true
	})
	return nil
}

// list copies the refusals so far.
func (r refusals) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), *r.errs...)
}

func (r refusals) any(sub string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range *r.errs {
		if strings.Contains(e, sub) {
			return true
		}
	}
	return false
}

// TestSignalReplayAfterRestart: a signal recorded on its way to beta and
// replayed after beta restarted is refused (it names beta's earlier
// registration epoch), where the restarted node's empty replay guard
// alone would take it; alpha's fresh signals still bring the pair direct
// (finding 9).
func TestSignalReplayAfterRestart(t *testing.T) {
	w := newLabWorld(t)
	// Control sees every signal it relays: the recording is made there.
	tap, err := w.ctrl.Conn().SubscribeSync("lattice.v1.node.*." + controlapi.LeafSignalIn)
	require.NoError(t, err)
	credB := filepath.Join(t.TempDir(), "beta.json")
	withCreds := func(c *node.Config) { c.Credentials = node.OpenCredentials(credB) }
	hostB := w.site(t, "full-cone")
	a := startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{})
	b := startNode(t, hostB, "beta", &stockNetstack{}, withCreds)
	betaID := b.Identity().NodeID
	var recorded *nats.Msg
	deadline := time.Now().Add(slow(10 * time.Second))
	for recorded == nil && time.Now().Before(deadline) {
		m, err := tap.NextMsg(time.Second)
		if err == nil && m.Subject == controlapi.NodeSubject(betaID, controlapi.LeafSignalIn) && m.Header.Get(controlapi.HeaderFrom) == a.Identity().NodeID {
			recorded = m
		}
	}
	require.NotNil(t, recorded, "no signal from alpha to beta")
	require.NoError(t, tap.Unsubscribe())

	require.NoError(t, b.Close())
	log := newRefusals()
	b2 := startNode(t, hostB, "beta", &stockNetstack{}, withCreds, func(c *node.Config) { c.Logger = slog.New(log) })
	require.Equal(t, betaID, b2.Identity().NodeID)
	replay := nats.NewMsg(recorded.Subject)
	replay.Header.Set(controlapi.HeaderFrom, recorded.Header.Get(controlapi.HeaderFrom))
	replay.Data = recorded.Data
	require.NoError(t, w.ctrl.Conn().PublishMsg(replay))
	require.Eventually(t, func() bool { return log.any("registration epoch") }, slow(5*time.Second), 10*time.Millisecond,
		"the replayed signal was not refused for its epoch: %v", log.list())
	waitPath(t, b2, node.PathDirect, slow(15*time.Second))
}
