package node_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/node"
)

// flakyDials fails the TCP dials to one address whose 1-based number is
// in fail, as a loaded machine's connect timeouts or a restarting control
// do, and counts them all.
type flakyDials struct {
	netx.Network
	to   string
	fail map[int]bool

	// failFrom, if set, fails every dial numbered failFrom or later.
	failFrom int

	mu    sync.Mutex
	dials int
}

func (f *flakyDials) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if address == f.to {
		f.mu.Lock()
		f.dials++
		n := f.dials
		failFrom := f.failFrom
		f.mu.Unlock()
		if f.fail[n] || (failFrom > 0 && n >= failFrom) {
			return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("i/o timeout (injected)")}
		}
	}
	return f.Network.Dial(ctx, network, address)
}

func (f *flakyDials) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dials
}

// TestStartRetriesControl: a node whose first registration dial and first
// session dial fail still starts, and reaches its peer; before, the first
// timeout failed Start (a 1000-node lab lost a node that way).
func TestStartRetriesControl(t *testing.T) {
	byClock(t, testStartRetriesControl, testStartRetriesControl)
}

func testStartRetriesControl(t *testing.T) {
	w := newLabWorld(t)
	pb := &stockNetstack{}
	startNode(t, w.site(t, "full-cone"), "beta", pb)
	flaky := &flakyDials{Network: w.site(t, "full-cone"), to: natsAddr, fail: map[int]bool{1: true, 3: true}}
	pa := &stockNetstack{}
	a := startNode(t, nil, "alpha", pa, func(c *node.Config) { c.Network = flaky })
	assert.Equal(t, 4, flaky.count(), "dials: a failed and a good one to register, the same for the session")
	waitPath(t, a, node.PathDirect, 10*time.Second)
}

// TestStartRefusalNotRetried: control's refusal is its answer: Start
// returns it at once, after one registration, naming it.
func TestStartRefusalNotRetried(t *testing.T) {
	w := newLabWorld(t)
	flaky := &flakyDials{Network: w.site(t, "full-cone"), to: natsAddr}
	start := time.Now()
	_, err := node.Start(t.Context(), node.Config{
		Name: "alpha", Network: flaky, Control: "nats://" + natsAddr + "?insecure=1", Token: "not-the-token-0123456789",
		Provisioner: &stockNetstack{},
	})
	var refusal *controlapi.Error
	require.ErrorAs(t, err, &refusal)
	assert.Equal(t, controlapi.CodeBadToken, refusal.Code)
	// One to register and one the node dialed ahead for its session
	// once that connection was up (control.Predialer); a retry would
	// register again.
	assert.Equal(t, 2, flaky.count(), "a refusal is not tried again")
	assert.Less(t, time.Since(start), 5*time.Second)
}

// TestStartGivesUp: a control that cannot be reached fails Start after a
// bounded number of tries, saying so.
func TestStartGivesUp(t *testing.T) {
	byClock(t, testStartGivesUp, testStartGivesUp)
}

func testStartGivesUp(t *testing.T) {
	w := newLabWorld(t)
	fail := map[int]bool{}
	for i := 1; i <= 20; i++ {
		fail[i] = true
	}
	flaky := &flakyDials{Network: w.site(t, "full-cone"), to: natsAddr, fail: fail}
	start := time.Now()
	_, err := node.Start(t.Context(), node.Config{
		Name: "alpha", Network: flaky, Control: "nats://" + natsAddr + "?insecure=1", Token: labToken,
		Provisioner: &stockNetstack{},
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "gave up after 6 attempts")
	assert.Contains(t, err.Error(), "injected")
	assert.Equal(t, 6, flaky.count())
	// Five waits between six tries: 0.25 + 0.5 + 1 + 2 + 4 s.
	assert.GreaterOrEqual(t, time.Since(start), 7750*time.Millisecond, "backs off between tries")
}

// TestStartBadURLNotRetried: a control URL of an unknown scheme is the
// caller's mistake: Start names it at once, without trying again.
func TestStartBadURLNotRetried(t *testing.T) {
	w := newLabWorld(t)
	start := time.Now()
	_, err := node.Start(t.Context(), node.Config{
		Name: "alpha", Network: w.site(t, "full-cone"), Control: "ftp://" + natsAddr, Token: labToken,
		Provisioner: &stockNetstack{},
	})
	require.ErrorContains(t, err, `control URL "ftp://`+natsAddr+`": want tls://, https://, nats:// or http://`)
	assert.Less(t, time.Since(start), 250*time.Millisecond, "not tried again: the first backoff is 250 ms")
}

// failAfterNow fails every dial from the next one on.
func (f *flakyDials) failAfterNow() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failFrom = f.dials + 1
}

// TestCloseEndsReregister: a node re-registering with a control it cannot
// reach is between backoff waits when it closes; Close ends the retries at
// once and waits for them. Before, they slept out their backoff (up to
// 30 s) on their own goroutine after Close had returned.
func TestCloseEndsReregister(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		w := newLabWorld(t)
		flaky := &flakyDials{Network: w.site(t, "full-cone"), to: natsAddr}
		a := startNode(t, nil, "alpha", &stockNetstack{}, func(c *node.Config) { c.Network = flaky })
		flaky.failAfterNow()
		done := make(chan struct{})
		go func() {
			defer close(done)
			a.ReregisterForTest()
		}()
		// Tries at 0, 1, 3, 7 and 15 s fail; at 20 s it waits for 31 s.
		time.Sleep(20 * time.Second)
		tries := flaky.count()
		start := time.Now()
		require.NoError(t, a.Close())
		select {
		case <-done:
		default:
			t.Fatal("Close returned with re-registration still running")
		}
		assert.Less(t, time.Since(start), time.Second, "Close waited out a backoff")
		assert.Equal(t, tries, flaky.count(), "no try after Close")
		assert.GreaterOrEqual(t, tries, 2+5, "register and session dials, then five failed tries")
	})
}
