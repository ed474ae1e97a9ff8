package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
)

// Peer events are deltas: one change is one PeerEvent of a few hundred
// bytes, published once on SubjectPeerEvents, where NATS hands it to every
// node that subscribed (every node that registered with SharedEvents).
// Only nodes that did not ask for it (older clients) get a copy of their
// own on LeafPeers, so a change costs control one publish plus one per
// such node, not one per node.

// publishEvent announces ev to every node but ev's own.
func (s *Server) publishEvent(ev controlapi.PeerEvent) {
	if ev.Peer.Rev != 0 {
		ev.Peer.Reg = s.registry()
	}
	b, err := json.Marshal(ev)
	if err != nil {
		s.log.Error("encode peer event", "err", err)
		return
	}
	if err := s.nc.Publish(controlapi.SubjectPeerEvents, b); err != nil {
		s.log.Warn("peer event", "to", controlapi.SubjectPeerEvents, "err", err)
	} else if i := slices.Index(PeerEventTypes[:], ev.Type); i >= 0 {
		s.events[i].Add(1)
	}
	for _, id := range s.view.legacyIDs() {
		if id == ev.Peer.NodeID {
			continue
		}
		if err := s.nc.Publish(controlapi.NodeSubject(id, controlapi.LeafPeers), b); err != nil {
			s.log.Warn("peer event", "to", id, "err", err)
		}
	}
}

// watcher is a Store shared with other instances, whose changes this
// instance follows (KVStore.Watch).
type watcher interface {
	Watch(ctx context.Context, apply func(id string, n *Node, rev uint64), seen func(rev uint64), ready func()) (<-chan struct{}, error)
	// lastRevision is the revision of the store's last change (to a
	// node or a claim): seen reports it once the watch delivered every
	// change made before the call.
	lastRevision(ctx context.Context) (uint64, error)
	// registry names the store's incarnation (controlapi.Peer.Reg): when
	// it was made, so a store made again names itself with a larger one.
	registry() uint64
}

// registry is the shared registry's Reg (controlapi.Peer.Reg): 0 for a
// store of one instance.
func (s *Server) registry() uint64 {
	if s.regOf == nil {
		return 0
	}
	return s.regOf()
}

// loadView fills the view from the store and, for a shared store, keeps
// it following the store until ctx ends (the watch's goroutine is
// waited for in Close). It returns once the nodes stored now are in.
func (s *Server) loadView(ctx, watchCtx context.Context) error {
	w, ok := s.cfg.Store.(watcher)
	if !ok {
		nodes, err := s.cfg.Store.List(ctx)
		if err != nil {
			return fmt.Errorf("control: load registry: %w", err)
		}
		for _, n := range nodes {
			s.view.put(n, 0)
		}
		return nil
	}
	s.regOf = w.registry
	if !s.cfg.noBarrier {
		read := func(ctx context.Context) (uint64, error) {
			if hook := s.cfg.barrierReadHook; hook != nil {
				hook()
			}
			was := w.registry()
			rev, err := w.lastRevision(ctx)
			if now := w.registry(); now != was {
				s.log.Error("registry bucket made again while this instance ran: its view may hold records of the old one; restart it", "reg", now, "was", was)
			}
			return rev, err
		}
		s.barrier = newReadBarrier(read, s.cfg.barrierWait, watchCtx.Done(), s.log)
	}
	ready := make(chan struct{})
	var once bool
	stopped, err := w.Watch(watchCtx, func(id string, n *Node, rev uint64) {
		if s.cfg.watchHook != nil {
			s.cfg.watchHook(id, rev)
		}
		if n == nil {
			s.view.removeAt(id, rev)
			return
		}
		s.announceMu.Lock()
		defer s.announceMu.Unlock()
		old := s.view.get(id)
		s.view.put(n, rev)
		if once && (old == nil || n.Epoch > old.Epoch) && s.markOnline(id) && old != nil {
			// Registered (again) on another instance, which took it online
			// and announced it: so does this one, or it would list the node
			// offline until its first heartbeat came here. A known node
			// this instance had offline is announced online again: the
			// offline may have been the goodbye of its earlier life,
			// taken here before the watch brought the new epoch.
			s.announcePresence(watchCtx, []string{id}, controlapi.PeerOnline)
		}
	}, func(rev uint64) {
		if s.barrier != nil {
			s.barrier.advance(rev)
		}
	}, func() {
		if !once {
			once = true
			close(ready)
		}
	})
	if err != nil {
		return fmt.Errorf("control: load registry: %w", err)
	}
	s.watchDone = stopped
	select {
	case <-ready:
		return nil
	case <-stopped:
		return errors.New("control: load registry: the watch ended before the registry was read")
	case <-ctx.Done():
		return fmt.Errorf("control: load registry: %w", ctx.Err())
	case <-time.After(time.Minute):
		return errors.New("control: load registry: not read within a minute")
	}
}
