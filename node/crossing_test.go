package node

import (
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"golang.zx2c4.com/wireguard/conn"

	"github.com/latticelab/lattice/key"
)

// TestCrossingInitiations: the leading side drops the peer's handshake
// initiation while its own is unanswered, and only then; the other side
// never does.
func TestCrossingInitiations(t *testing.T) {
	init := make([]byte, 148)
	init[0] = 1
	data := make([]byte, 64)
	data[0] = 4

	crossing := func(p *Path, pkt []byte) bool {
		drop, _ := p.crossing(pkt, time.Now().UnixNano())
		return drop
	}
	p := &Path{}
	assert.False(t, crossing(p, init), "nothing sent yet")
	p.hs = &resend{init: []byte{1}, sent: time.Now(), timer: time.NewTimer(time.Hour)}
	assert.False(t, crossing(p, init), "the side that does not lead answers every initiation")

	p.SetLeads(true)
	assert.True(t, crossing(p, init), "ours is on its way: the peer's crosses it")
	assert.False(t, crossing(p, data), "only initiations")
	assert.False(t, crossing(p, init[:147]), "only whole initiations")

	hs := p.hs
	p.stopResends()
	assert.False(t, crossing(p, init), "ours was answered: a new one from the peer is a rekey")

	hs.sent = time.Now().Add(-glareWindow)
	p.hs = hs
	assert.False(t, crossing(p, init), "ours has been unanswered too long to hold the peer's back")
}

// TestCrossingYieldsToAPeerThatDidNotAnswer: the peer resends its
// initiation 100, 300, 700 and 1500 ms after it while ours goes unanswered: it
// did not answer ours (its WireGuard dropped ours while making its own),
// and our resends are replays to it. The leading side drops the copies
// that could still have crossed ours (within glareYield of the first)
// and lets the later one through, once, instead of both sides waiting
// out the glare window and WireGuard's 3 s keepalive or 5 s retry. A
// new initiation of the peer's starts over.
func TestCrossingYieldsToAPeerThatDidNotAnswer(t *testing.T) {
	initA := make([]byte, 148)
	initA[0], initA[8] = 1, 0xa
	initB := make([]byte, 148)
	initB[0], initB[8] = 1, 0xb
	p := &Path{}
	p.SetLeads(true)
	start := time.Now()
	p.hs = &resend{init: []byte{1}, sent: start, timer: time.NewTimer(time.Hour)}
	at := func(d time.Duration) int64 { return start.Add(d).UnixNano() }

	for _, d := range []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond} {
		drop, yield := p.crossing(initA, at(d))
		assert.True(t, drop, "copy at %v: could still be crossing ours", d)
		assert.False(t, yield)
	}
	drop, yield := p.crossing(initB, at(200*time.Millisecond))
	assert.True(t, drop, "a new initiation of the peer's crosses ours afresh")
	assert.False(t, yield)
	drop, yield = p.crossing(initB, at(1400*time.Millisecond))
	assert.True(t, drop, "its copies are timed from its own first")
	assert.False(t, yield)
	drop, yield = p.crossing(initB, at(1500*time.Millisecond))
	assert.False(t, drop, "a copy glareYield after the first: the peer did not answer ours")
	assert.True(t, yield)
	drop, _ = p.crossing(initB, at(1600*time.Millisecond))
	assert.True(t, drop, "let through once; the next copy is dropped (as the duplicate it is)")
}

// recordRelay keeps what the Bind sends through the relay.
type recordRelay struct {
	mu   sync.Mutex
	sent [][]byte
}

func (r *recordRelay) Send(_ key.Public, pkt []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, append([]byte(nil), pkt...))
	return nil
}

// TestKick: an unanswered initiation of ours is sent again at once when
// the peer is heard (a signal, or its own initiation dropped as crossing
// ours), once per initiation; not once it was answered, nor once we
// answered the peer's (WireGuard dropped ours for it).
func TestKick(t *testing.T) {
	init, resp := handshakeMessages()
	tests := []struct {
		name string
		run  func(b *Bind, p *Path)
		want uint64 // kicks
		// void: WireGuard dropped our initiation; its resends stop.
		void bool
	}{
		{"nothing sent", func(b *Bind, p *Path) { b.PeerHeard(p) }, 0, false},
		{"heard", func(b *Bind, p *Path) {
			b.noteSent(p, [][]byte{init})
			b.PeerHeard(p)
		}, 1, false},
		{"heard twice", func(b *Bind, p *Path) {
			b.noteSent(p, [][]byte{init})
			b.PeerHeard(p)
			b.PeerHeard(p)
		}, 1, false},
		{"a new initiation is kicked again", func(b *Bind, p *Path) {
			b.noteSent(p, [][]byte{init})
			b.PeerHeard(p)
			b.noteSent(p, [][]byte{init})
			b.PeerHeard(p)
		}, 2, false},
		{"answered", func(b *Bind, p *Path) {
			b.noteSent(p, [][]byte{init})
			b.noteReceived(p, resp)
			b.PeerHeard(p)
		}, 0, false},
		{"we answered the peer's", func(b *Bind, p *Path) {
			b.noteSent(p, [][]byte{init})
			b.noteSent(p, [][]byte{resp})
			b.PeerHeard(p)
		}, 0, true},
		{"crossing initiation dropped", func(b *Bind, p *Path) {
			p.SetLeads(true)
			b.noteSent(p, [][]byte{init})
			b.DeliverRelayed(p.Key, init)
			assert.Equal(t, uint64(1), b.Crossed())
			assert.Empty(t, b.relayIn, "dropped")
		}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, p, sent := relayedPath(t)
			tt.run(b, p)
			assert.Equal(t, tt.want, b.Kicked())
			assert.GreaterOrEqual(t, uint64(len(sent(init))), tt.want, "kicks go out")
			if tt.void {
				p.hsMu.Lock()
				defer p.hsMu.Unlock()
				assert.Nil(t, p.hs, "no resends of an initiation WireGuard dropped")
			}
		})
	}
}

// TestRelayUp: once the relay connects, an unanswered initiation is sent
// again, whether or not it was kicked, and without using up its kick;
// nothing when none is unanswered or the path is direct.
func TestRelayUp(t *testing.T) {
	init, resp := handshakeMessages()
	tests := []struct {
		name      string
		run       func(b *Bind, p *Path)
		wantSent  int    // through the relay
		wantKicks uint64 // PeerHeard's afterwards
	}{
		{"nothing sent", func(b *Bind, p *Path) { b.RelayUp(p) }, 0, 0},
		{"unanswered", func(b *Bind, p *Path) {
			b.noteSent(p, [][]byte{init})
			b.RelayUp(p)
			b.PeerHeard(p)
		}, 2, 1},
		{"kicked already", func(b *Bind, p *Path) {
			b.noteSent(p, [][]byte{init})
			b.PeerHeard(p)
			b.RelayUp(p)
		}, 2, 1},
		{"answered", func(b *Bind, p *Path) {
			b.noteSent(p, [][]byte{init})
			b.noteReceived(p, resp)
			b.RelayUp(p)
		}, 0, 0},
		{"direct", func(b *Bind, p *Path) {
			b.SetDirect(p, netip.MustParseAddrPort("203.0.113.1:51820"))
			b.noteSent(p, [][]byte{init})
			b.RelayUp(p)
		}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, p, sent := relayedPath(t)
			tt.run(b, p)
			assert.Equal(t, tt.wantKicks, b.Kicked())
			assert.Len(t, sent(init), tt.wantSent)
		})
	}
}

// handshakeMessages are a WireGuard initiation and response, as far as
// the Bind looks at them (type and length).
func handshakeMessages() (init, resp []byte) {
	init, resp = make([]byte, 148), make([]byte, 92)
	init[0], resp[0] = 1, 2
	return init, resp
}

// relayedPath is a Bind with a peer's Path and a relay that records what
// it is sent; sent returns that, checking each packet is want.
func relayedPath(t *testing.T) (b *Bind, p *Path, sent func(want []byte) [][]byte) {
	t.Helper()
	b = NewBind(nil)
	r := &recordRelay{}
	b.SetRelay(r)
	p = b.Peer(key.Public{1})
	t.Cleanup(func() { p.stopResends() })
	return b, p, func(want []byte) [][]byte {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, pkt := range r.sent {
			assert.Equal(t, want, pkt)
		}
		return r.sent
	}
}

// TestDuplicateInitiations: a copy of the peer's initiation reaching us
// again within dupInitWindow (its resends, the relay's and the direct
// path's copies) is dropped before WireGuard, whose handshake workers
// would answer two copies taken at once with two different sessions; a
// new initiation, and a copy after the window, go through.
func TestDuplicateInitiations(t *testing.T) {
	b, p, _ := relayedPath(t)
	init, _ := handshakeMessages()
	init[8] = 0xaa // the ephemeral key's first byte
	other := append([]byte(nil), init...)
	other[8] = 0xbb

	b.DeliverRelayed(p.Key, init)
	b.DeliverRelayed(p.Key, init)
	assert.Len(t, b.relayIn, 1, "the copy does not reach WireGuard")
	assert.Equal(t, uint64(1), b.DuplicateInitiations())
	assert.Zero(t, b.Kicked(), "a copy is not the peer crossing ours")

	b.DeliverRelayed(p.Key, other)
	assert.Len(t, b.relayIn, 2, "a new initiation goes through")

	now := time.Now().UnixNano()
	assert.True(t, p.duplicate(other, now), "a copy of the latest")
	assert.False(t, p.duplicate(other, now+int64(dupInitWindow)), "a copy after the window goes through")
	assert.False(t, p.duplicate(make([]byte, 92), now), "only initiations")
}

// TestWithheldInitiation: an initiation of ours made while WireGuard owes
// the peer an answer (its initiation passed within initHold) is not sent
// at once. WireGuard's answer replaces it, so it is then never sent: had
// it gone, the peer's WireGuard would have answered it in place of its
// own pending initiation, and neither answer would complete a handshake
// until WireGuard's retry 5 s later. With no answer within initHold (the
// peer's initiation refused), ours goes, and its resends follow.
func TestWithheldInitiation(t *testing.T) {
	init, resp := handshakeMessages()
	peerInit := append([]byte(nil), init...)
	peerInit[8] = 0xaa
	tests := []struct {
		name      string
		run       func(t *testing.T, b *Bind, ep *Endpoint)
		wantInits int // ours that reached the relay
		withheld  uint64
	}{
		{"answered", func(t *testing.T, b *Bind, ep *Endpoint) {
			b.DeliverRelayed(ep.Path.Key, peerInit)
			require.NoError(t, b.Send([][]byte{init}, ep))
			b.PeerHeard(ep.Path) // a kick sends nothing withheld
			b.RelayUp(ep.Path)
			require.NoError(t, b.Send([][]byte{resp}, ep))
			time.Sleep(time.Second)
		}, 0, 1},
		{"never answered", func(t *testing.T, b *Bind, ep *Endpoint) {
			b.DeliverRelayed(ep.Path.Key, peerInit)
			require.NoError(t, b.Send([][]byte{init}, ep))
			time.Sleep(initHold - time.Millisecond)
			synctest.Wait()
			assert.Equal(t, 0, countInits(b), "withheld while an answer is due")
			b.noteReceived(ep.Path, resp) // stale or forged: it answers nothing of ours
			synctest.Wait()
			assert.Equal(t, 0, countInits(b), "withheld still")
			time.Sleep(time.Millisecond)
			synctest.Wait()
			assert.Equal(t, 1, countInits(b), "sent once initHold passed")
			time.Sleep(handshakeResends[0])
		}, 2, 0},
		{"answered before ours was made", func(t *testing.T, b *Bind, ep *Endpoint) {
			b.DeliverRelayed(ep.Path.Key, peerInit)
			require.NoError(t, b.Send([][]byte{resp}, ep))
			require.NoError(t, b.Send([][]byte{init}, ep))
		}, 1, 0},
		{"the peer's initiation long passed", func(t *testing.T, b *Bind, ep *Endpoint) {
			b.DeliverRelayed(ep.Path.Key, peerInit)
			time.Sleep(initHold)
			require.NoError(t, b.Send([][]byte{init}, ep))
		}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewBind(nil)
				b.SetRelay(&recordRelay{})
				p := b.Peer(key.Public{1})
				defer p.stopResends()
				tt.run(t, b, &Endpoint{Path: p})
				synctest.Wait()
				assert.Equal(t, tt.wantInits, countInits(b))
				assert.Equal(t, tt.withheld, b.Withheld())
			})
		})
	}
}

// TestWithheldFromHandOver: WireGuard owes the peer's initiation an
// answer from when the Bind hands it over, not only from its check: a
// trimmed peer's restore (an IpcSet, slow on a busy machine) and the
// queue come between, and an initiation of ours made after them must
// still be withheld.
func TestWithheldFromHandOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, init, _, peerInit := withheldBind()
		p := b.Peer(key.Public{1})
		defer p.stopResends()
		restore := func() { time.Sleep(initHold) }
		p.restore.Store(&restore)
		b.DeliverRelayed(p.Key, peerInit)
		bufs, sizes, eps := [][]byte{make([]byte, 1500)}, []int{0}, []conn.Endpoint{nil}
		n, err := b.receiveRelayed(make(chan struct{}))(bufs, sizes, eps)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		withheldThenSent(t, b, p, init, 0)
	})
}

// TestWithheldAcrossRemoval: a peer removed and added again at once (its
// goodbye and its next registration, as after a restart) keeps what
// WireGuard owes it: WireGuard reads a queued initiation by the key
// inside, and the peer added again answers it, so our initiation made
// meanwhile on the new path is withheld as on the old one. A path made
// again after initHold owes nothing.
func TestWithheldAcrossRemoval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, init, resp, peerInit := withheldBind()
		k := key.Public{1}
		old := b.Peer(k)
		b.DeliverRelayed(k, peerInit)
		b.RemovePeer(k)
		p := b.peer(k, true) // WireGuard's configuration adds it again
		require.NoError(t, b.Send([][]byte{init}, &Endpoint{Path: p}))
		// WireGuard answers on the endpoint the initiation came with: the
		// removed path's. The answer is the new path's, and ours, given
		// up for it, is never sent.
		require.NoError(t, b.Send([][]byte{resp}, &Endpoint{Path: old}))
		time.Sleep(initHold)
		synctest.Wait()
		assert.Equal(t, 0, countInits(b), "answered on the removed path's endpoint")
		assert.Equal(t, uint64(1), b.Withheld())

		next0 := append([]byte(nil), peerInit...)
		next0[8] = 0xcc
		b.DeliverRelayed(k, next0)
		b.RemovePeer(k)
		p = b.peer(k, true)
		withheldThenSent(t, b, p, init, 0) // on the path made again
		p.stopResends()

		next := append([]byte(nil), peerInit...)
		next[8] = 0xbb
		b.DeliverRelayed(k, next)
		b.RemovePeer(k)
		time.Sleep(initHold)
		p = b.peer(k, true)
		defer p.stopResends()
		require.NoError(t, b.Send([][]byte{init}, &Endpoint{Path: p}))
		synctest.Wait()
		assert.Equal(t, 2, countInits(b), "made again after initHold: nothing owed")
	})
}

// withheldBind is a Bind whose relay records what it is sent (see
// countInits), with a WireGuard initiation and response of ours and an
// initiation of the peer's (another ephemeral key).
func withheldBind() (b *Bind, init, resp, peerInit []byte) {
	init, resp = handshakeMessages()
	peerInit = append([]byte(nil), init...)
	peerInit[8] = 0xaa
	b = NewBind(nil)
	b.SetRelay(&recordRelay{})
	return b, init, resp, peerInit
}

// withheldThenSent sends our initiation init on p and checks that it is
// withheld (sent says how many of ours went before) until initHold
// passes with no answer, and then sent. In a synctest bubble.
func withheldThenSent(t *testing.T, b *Bind, p *Path, init []byte, sent int) {
	t.Helper()
	require.NoError(t, b.Send([][]byte{init}, &Endpoint{Path: p}))
	synctest.Wait()
	assert.Equal(t, sent, countInits(b), "ours went while WireGuard owed the peer an answer")
	time.Sleep(initHold)
	synctest.Wait()
	assert.Equal(t, sent+1, countInits(b), "no answer: ours went at initHold")
}

// countInits counts the initiations b sent through its relay (a
// recordRelay).
func countInits(b *Bind) int {
	r := b.relay.(*recordRelay)
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, pkt := range r.sent {
		if isInitiation(pkt) {
			n++
		}
	}
	return n
}

// TestPathLeadsFromItsMaking: once the Bind knows our key, a path it
// makes (WireGuard's configuration makes one before the node's peer
// exists) already knows which side's handshake wins a crossing.
func TestPathLeadsFromItsMaking(t *testing.T) {
	b := NewBind(nil)
	assert.False(t, b.Peer(key.Public{5}).leads.Load(), "our key unknown")
	b.SetSelf(key.Public{3})
	assert.True(t, b.peer(key.Public{4}, true).leads.Load(), "ours is the lower key")
	assert.False(t, b.Peer(key.Public{2}).leads.Load(), "the peer's is the lower key")
}
