package control

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/netx"
)

// TestLostAnswerTakenBack: a registration's event reaches the other nodes
// before its answer leaves (so nothing the node does once answered can
// overtake it), and when the answer cannot be sent the registration is
// undone and a removal follows the "add", in that order; the store no
// longer holds the node.
func TestLostAnswerTakenBack(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	a, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "alpha", Key: newPriv(t)})
	require.NoError(t, err)
	events := make(chan controlapi.PeerEvent, 4)
	sa, err := controlapi.Connect(ctx, netx.OS, a.NodeID, a.NATS, controlapi.Handlers{Peer: func(ev controlapi.PeerEvent) { events <- ev }})
	require.NoError(t, err)
	defer sa.Close()

	err = registerLosingAnswer(ctx, env.srv, controlapi.Join{Token: testToken, Name: "beta", Key: newPriv(t)}, nil)
	require.ErrorIs(t, err, errLostAnswer)
	var got []controlapi.PeerEvent
	for len(got) < 2 {
		select {
		case ev := <-events:
			got = append(got, ev)
		case <-time.After(5 * time.Second):
			t.Fatalf("events so far: %+v", got)
		}
	}
	assert.Equal(t, controlapi.PeerAdded, got[0].Type)
	assert.Equal(t, controlapi.PeerRemoved, got[1].Type, "the registration taken back")
	assert.Equal(t, got[0].Peer.NodeID, got[1].Peer.NodeID)
	assert.Equal(t, "beta", got[1].Peer.Name)
	_, err = env.srv.cfg.Store.Get(ctx, got[0].Peer.NodeID)
	assert.ErrorIs(t, err, ErrNotFound, "not stored")
}

// TestLostAnswerUndoKeepsNewerRecord: a new node's registration on one
// instance loses its answer, and before it is undone the node registers
// again through another instance sharing the registry. The undo takes
// back only the record it created: the newer registration stays, with its
// address and name claimed, and the first instance's view keeps it.
func TestLostAnswerUndoKeepsNewerRecord(t *testing.T) {
	ctx := ctxT(t)
	a, b := sharedPair(t, Config{}, Config{})
	onB := b.NATS().URL()
	priv := newPriv(t)
	join := controlapi.Join{Token: testToken, Name: "again", Key: priv}
	_, events := watchEvents(ctx, t, a.NATS().URL())

	var newer *controlapi.RegisterResponse
	err := registerLosingAnswer(ctx, a, join, func() {
		// Stored on a, not yet answered: the node registers again
		// through the other instance.
		var err error
		newer, err = controlapi.RegisterNATS(ctx, netx.OS, onB, join)
		require.NoError(t, err)
	})
	require.ErrorIs(t, err, errLostAnswer)
	require.NotNil(t, newer)

	kv := a.cfg.Store.(*KVStore)
	held, err := kv.Get(ctx, newer.NodeID)
	require.NoError(t, err, "the newer registration, through the other instance, was deleted by the undo")
	assert.Equal(t, newer.Epoch, held.Epoch)
	for _, k := range []string{addrKey(held), nameKey(held)} {
		e, err := kv.kv.Get(ctx, k)
		require.NoError(t, err, "claim %s", k)
		assert.Equal(t, newer.NodeID, string(e.Value()), "claim %s", k)
	}
	require.Eventually(t, func() bool {
		n := a.view.get(newer.NodeID)
		return n != nil && n.Epoch == newer.Epoch
	}, 5*time.Second, 10*time.Millisecond, "a's view holds the newer registration")

	// a announced the registration it stored, and nothing more: the undo
	// found the record rewritten and took nothing back. (a's events come
	// in the order a published them: the marker's add follows any removal.)
	marker := mustRegister(ctx, t, a.NATS().URL(), "marker")
	var got []controlapi.PeerEventType
	for done := false; !done; {
		select {
		case ev := <-events:
			switch ev.Peer.NodeID {
			case newer.NodeID:
				got = append(got, ev.Type)
			case marker.NodeID:
				done = true
			}
		case <-ctx.Done():
			t.Fatalf("no event about the marker; about the node: %v", got)
		}
	}
	assert.Equal(t, []controlapi.PeerEventType{controlapi.PeerAdded}, got, "a took back a registration another instance had made since")
	assert.True(t, a.online(newer.NodeID), "a shows the registered node offline")
}

// registerLosingAnswer registers join on srv, whose answer to the proof
// (after the challenge) is lost: beforeLoss, if not nil, runs first, the
// registration stored and not yet answered. It returns the registration's
// error, which wraps errLostAnswer.
func registerLosingAnswer(ctx context.Context, srv *Server, join controlapi.Join, beforeLoss func()) error {
	answers := 0
	_, err := controlapi.Register(ctx, join, func(ctx context.Context, body []byte) ([]byte, error) {
		var out []byte
		_, err := srv.registerAndSend(ctx, body, func(answer []byte) error {
			answers++
			if answers < 2 { // the challenge
				out = answer
				return nil
			}
			if beforeLoss != nil {
				beforeLoss()
			}
			return errLostAnswer
		})
		return out, err
	})
	return err
}

var errLostAnswer = errors.New("the answer was lost on the way")
