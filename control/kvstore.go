package control

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KVStore is a Store in a NATS JetStream key-value bucket, so several
// control instances can share one registry and stay stateless. Addresses
// and names are claimed with atomic creates of "addr.<address>" and
// "name.<name>" keys, so two instances can never hand out the same one;
// nodes live under "node.<id>".
type KVStore struct {
	kv      jetstream.KeyValue
	stream  jetstream.Stream // the bucket's, for lastRevision
	created atomic.Uint64    // when the bucket's stream was made, Unix ns (registry)
}

var _ Store = (*KVStore)(nil)

// KVOptions configure OpenKVStore.
type KVOptions struct {
	// Bucket names the JetStream key-value bucket. Required.
	Bucket string
	// Replicas is the bucket's replica count. If zero, 3 when nc is
	// connected to a NATS cluster, else 1. An existing bucket is updated
	// to it.
	Replicas int
}

// OpenKVStore opens (creating if needed) the bucket on nc's JetStream.
func OpenKVStore(ctx context.Context, nc *nats.Conn, o KVOptions) (*KVStore, error) {
	if o.Bucket == "" {
		return nil, errors.New("registry bucket: no name")
	}
	if o.Replicas < 0 || o.Replicas > 5 {
		return nil, fmt.Errorf("registry bucket %s: %d replicas: want 1 to 5 (JetStream's limit)", o.Bucket, o.Replicas)
	}
	if o.Replicas == 0 {
		o.Replicas = 1
		if nc.ConnectedClusterName() != "" {
			o.Replicas = 3
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("registry bucket %s: %w", o.Bucket, err)
	}
	kv, err := createBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      o.Bucket,
		Description: "Lattice control registry",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    o.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("registry bucket %s (%d replicas): %w", o.Bucket, o.Replicas, err)
	}
	st, err := js.Stream(ctx, "KV_"+o.Bucket)
	if err != nil {
		return nil, fmt.Errorf("registry bucket %s: %w", o.Bucket, err)
	}
	created := st.CachedInfo().Created.UnixNano()
	if created <= 0 {
		return nil, fmt.Errorf("registry bucket %s: its stream has no creation time (%v)", o.Bucket, st.CachedInfo().Created)
	}
	s := &KVStore{kv: kv, stream: st}
	s.created.Store(uint64(created))
	return s, nil
}

// registry names the bucket by when its stream was made: a bucket
// deleted and made again, its revisions counting from 1 again, names
// itself with a larger number (controlapi.Peer.Reg). It is read again
// with the bucket's last revision (lastRevision): an instance that lives
// through the bucket's remaking writes into the new one, at its
// revisions, and must name it.
func (s *KVStore) registry() uint64 { return s.created.Load() }

// createBucket binds to the bucket, creating it if there is none, trying
// again every few seconds until ctx ends: a cluster still electing its
// JetStream leader (its servers starting together) leaves requests
// unanswered. An existing bucket's configuration is left to
// readFromLeader: updating it here would turn direct gets back on under
// instances that turned them off.
func createBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	var noPeersSince time.Time
	for {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		kv, err := js.KeyValue(actx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(actx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) {
				kv, err = js.KeyValue(actx, cfg.Bucket)
			}
		}
		if err == nil {
			kv, err = tuneBucket(actx, js, cfg.Bucket, cfg.Replicas)
		}
		cancel()
		if err == nil || ctx.Err() != nil {
			return kv, err
		}
		if noPeers(err) {
			// A cluster forming may know too few JetStream servers for the
			// replicas yet; one that has too few for good (replicas over
			// its size) says so after noPeersWait.
			if noPeersSince.IsZero() {
				noPeersSince = time.Now()
			}
			if time.Since(noPeersSince) > noPeersWait {
				return nil, fmt.Errorf("%w (for %v: are there %d JetStream servers?)", err, noPeersWait, cfg.Replicas)
			}
		} else if !retryable(err) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// noPeersWait is how long createBucket waits for a cluster to have the
// JetStream servers the bucket's replicas need.
const noPeersWait = 30 * time.Second

// jsErrCodeNoPeers is JetStream's "no suitable peers for placement".
const jsErrCodeNoPeers jetstream.ErrorCode = 10005

// noPeers: the cluster knows fewer JetStream servers than the replicas.
func noPeers(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeNoPeers
}

// retryable: JetStream is not there yet (no leader, a cluster still
// forming: 503 answers, or none), or a bucket another instance just
// created is not known yet to the server asked.
func retryable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 503 {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound)
}

// tuneBucket gives an existing bucket the replica count asked for and,
// when replicated, turns off direct gets, which a follower may answer
// from behind the leader: a node's password read just after its
// registration wrote it, or a claim read after its create, must see that
// write. Reads then go to the stream leader.
func tuneBucket(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (jetstream.KeyValue, error) {
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	cfg := st.CachedInfo().Config
	if cfg.Replicas == replicas && cfg.AllowDirect == (replicas == 1) {
		return js.KeyValue(ctx, bucket)
	}
	cfg.Replicas, cfg.AllowDirect = replicas, replicas == 1
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return nil, fmt.Errorf("set %d replicas: %w", replicas, err)
	}
	return js.KeyValue(ctx, bucket)
}

// kvRecord is a node as the bucket holds it: with the revisions its
// address and name claims had when it was created (0: a record from
// before they were kept). Delete frees a claim only at its record's
// revision: a claim key holds just the node ID, so the claim a later
// life of the same key took over (rewritten, at a later revision) while
// this one was being deleted is told apart from this one's, and kept.
type kvRecord struct {
	*Node
	AddrClaim uint64 `json:"addr_claim,omitempty"`
	NameClaim uint64 `json:"name_claim,omitempty"`
}

func addrKey(n *Node) string {
	return "addr." + strings.ReplaceAll(n.Address.Addr().String(), ".", "-")
}
func nameKey(n *Node) string { return "name." + n.Name }

func (s *KVStore) Get(ctx context.Context, id string) (*Node, error) {
	r, _, err := s.get(ctx, id)
	return r.Node, err
}

func (s *KVStore) List(ctx context.Context) ([]*Node, error) {
	l, err := s.kv.ListKeysFiltered(ctx, "node.>")
	if err != nil {
		return nil, fmt.Errorf("registry list: %w", err)
	}
	var ids []string
	for k := range l.Keys() {
		ids = append(ids, strings.TrimPrefix(k, "node."))
	}
	slices.Sort(ids)
	out := make([]*Node, 0, len(ids))
	for _, id := range ids {
		n, err := s.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// claim atomically creates key with value id and returns the revision
// it holds the claim at. A key already holding id (a retried create, or a
// claim left by a create that failed half-way) counts as claimed once it
// is rewritten at the revision read: a release of the old claim racing
// this one then fails its compare and set rather than freeing what is
// claimed again.
func (s *KVStore) claim(ctx context.Context, key, id string) (uint64, bool, error) {
	rev, err := s.kv.Create(ctx, key, []byte(id))
	if err == nil {
		return rev, true, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return 0, false, fmt.Errorf("registry claim %s: %w", key, err)
	}
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, fmt.Errorf("registry claim %s: %w", key, ErrConflict)
	}
	if err != nil {
		return 0, false, fmt.Errorf("registry claim %s: %w", key, err)
	}
	if string(e.Value()) != id {
		return 0, false, nil
	}
	rev, err = s.kv.Update(ctx, key, []byte(id), e.Revision())
	if err != nil {
		if isWrongRevision(err) {
			return 0, false, fmt.Errorf("registry claim %s: %w", key, ErrConflict)
		}
		return 0, false, fmt.Errorf("registry claim %s: %w", key, err)
	}
	return rev, true, nil
}

// Create claims n's address, then its name, then creates its record. If
// the record exists (the same key registered on another instance
// meanwhile), the claims that record does not hold are released at the
// revisions this call made them, so none is left behind and none it holds
// is freed.
func (s *KVStore) Create(ctx context.Context, n *Node) error {
	addrRev, ok, err := s.claim(ctx, addrKey(n), n.ID)
	if err != nil {
		return err
	}
	if !ok {
		return ErrAddressTaken
	}
	nameRev, ok, err := s.claim(ctx, nameKey(n), n.ID)
	switch {
	case err != nil:
		s.release(ctx, addrKey(n), n.ID)
		return err
	case !ok:
		s.release(ctx, addrKey(n), n.ID)
		return ErrNameTaken
	}
	b, err := json.Marshal(kvRecord{Node: n, AddrClaim: addrRev, NameClaim: nameRev})
	var rev uint64
	if err == nil {
		rev, err = s.kv.Create(ctx, "node."+n.ID, b)
	}
	if err == nil {
		n.rev = rev
		return nil
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		e, gerr := s.kv.Get(ctx, "node."+n.ID)
		if gerr == nil && bytes.Equal(e.Value(), b) {
			n.rev = e.Revision()
			return nil // our own write, retried by the client after a lost answer
		}
		var held kvRecord
		if gerr == nil && json.Unmarshal(e.Value(), &held) == nil && held.Node != nil {
			if held.Address != n.Address {
				_ = s.kv.Purge(ctx, addrKey(n), jetstream.LastRevision(addrRev))
			}
			if held.Name != n.Name {
				_ = s.kv.Purge(ctx, nameKey(n), jetstream.LastRevision(nameRev))
			}
			gerr = s.adoptClaims(ctx, n, addrRev, nameRev)
		}
		if errors.Is(gerr, jetstream.ErrKeyNotFound) || errors.Is(gerr, ErrNotFound) {
			// Deleted meanwhile (its Delete could not free what this
			// create took over): nobody holds these claims but this
			// create, which gives them up and asks for another try.
			_ = s.kv.Purge(ctx, nameKey(n), jetstream.LastRevision(nameRev))
			_ = s.kv.Purge(ctx, addrKey(n), jetstream.LastRevision(addrRev))
			return fmt.Errorf("registry create %s: deleted meanwhile: %w", n.ID, ErrConflict)
		}
		return fmt.Errorf("registry create %s: %w", n.ID, ErrExists)
	}
	s.release(ctx, nameKey(n), n.ID)
	s.release(ctx, addrKey(n), n.ID)
	return fmt.Errorf("registry create %s: %w", n.ID, err)
}

// adoptClaims: n's create found n.ID created meanwhile (the same key
// registering on another instance), holding claims this create took over
// (rewrote) at addrRev and nameRev. The record's own revisions of them
// are gone, so it takes these, if they are still the claims' own: else
// its Delete would leave them behind. ErrNotFound: the record is gone.
func (s *KVStore) adoptClaims(ctx context.Context, n *Node, addrRev, nameRev uint64) error {
	for range 3 {
		held, rev, err := s.get(ctx, n.ID)
		if err != nil {
			return err
		}
		changed := false
		if held.Address == n.Address && held.AddrClaim != 0 && held.AddrClaim != addrRev && s.claimedAt(ctx, addrKey(n), addrRev) {
			held.AddrClaim, changed = addrRev, true
		}
		if held.Name == n.Name && held.NameClaim != 0 && held.NameClaim != nameRev && s.claimedAt(ctx, nameKey(n), nameRev) {
			held.NameClaim, changed = nameRev, true
		}
		if !changed {
			return nil
		}
		b, err := json.Marshal(held)
		if err != nil {
			return err
		}
		if _, err := s.kv.Update(ctx, "node."+n.ID, b, rev); err == nil || !isWrongRevision(err) {
			return err
		}
	}
	return nil
}

// claimedAt reports whether claim key is at revision rev.
func (s *KVStore) claimedAt(ctx context.Context, key string, rev uint64) bool {
	e, err := s.kv.Get(ctx, key)
	return err == nil && e.Revision() == rev
}

// releaseAt frees a claim key at revision rev, the one its record holds
// it at, if it still is: a claim taken over since (by a later life of the
// node) is kept.
func (s *KVStore) releaseAt(ctx context.Context, key, id string, rev uint64) {
	if rev == 0 { // a record from before claim revisions were kept
		s.release(ctx, key, id)
		return
	}
	_ = s.kv.Purge(ctx, key, jetstream.LastRevision(rev))
}

// release frees a claim key if id still holds it, at the revision read,
// so a claim someone else made meanwhile is never freed.
func (s *KVStore) release(ctx context.Context, key, id string) {
	e, err := s.kv.Get(ctx, key)
	if err != nil || string(e.Value()) != id {
		return
	}
	_ = s.kv.Purge(ctx, key, jetstream.LastRevision(e.Revision()))
}

// get returns id's record and the revision it was read at.
func (s *KVStore) get(ctx context.Context, id string) (kvRecord, uint64, error) {
	e, err := s.kv.Get(ctx, "node."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return kvRecord{}, 0, ErrNotFound
	}
	if err != nil {
		return kvRecord{}, 0, fmt.Errorf("registry get %s: %w", id, err)
	}
	r := kvRecord{Node: &Node{}}
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return kvRecord{}, 0, fmt.Errorf("registry entry %s is corrupt: %w", id, err)
	}
	r.rev = e.Revision()
	return r, e.Revision(), nil
}

// Update replaces id's record if it is still the one read: a compare and
// set on its revision (n's, when n was read from this store, else the
// one Update reads), so a concurrent update, delete or re-creation (with
// another address) in between fails it with ErrConflict instead of being
// overwritten.
func (s *KVStore) Update(ctx context.Context, n *Node) error {
	old, rev, err := s.get(ctx, n.ID)
	switch {
	case errors.Is(err, ErrNotFound) && n.rev != 0:
		return fmt.Errorf("registry update %s: deleted since read: %w", n.ID, ErrConflict)
	case err != nil:
		return err
	case n.rev != 0 && n.rev != rev:
		return fmt.Errorf("registry update %s: %w", n.ID, ErrConflict)
	}
	if old.Address != n.Address || old.Name != n.Name {
		return fmt.Errorf("control: update of %s changes its address or name", n.ID)
	}
	b, err := json.Marshal(kvRecord{Node: n, AddrClaim: old.AddrClaim, NameClaim: old.NameClaim})
	if err != nil {
		return fmt.Errorf("registry update %s: %w", n.ID, err)
	}
	rev, err = s.kv.Update(ctx, "node."+n.ID, b, rev)
	if err != nil {
		if isWrongRevision(err) {
			return fmt.Errorf("registry update %s: %w", n.ID, ErrConflict)
		}
		return fmt.Errorf("registry update %s: %w", n.ID, err)
	}
	n.rev = rev
	return nil
}

// isWrongRevision: a compare and set found another revision.
// Replicated streams report it with another code than single ones.
func isWrongRevision(err error) bool {
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Delete removes id's record at the revision read, then frees its name
// and address if they are still id's.
func (s *KVStore) Delete(ctx context.Context, id string) error {
	return s.deleteAt(ctx, id, 0)
}

var _ revisionDeleter = (*KVStore)(nil)

// deleteAt is Delete of the record at revision want only (0: the one
// read): a record another instance wrote since (updated, or deleted and
// created again) is left, with the claims it holds.
func (s *KVStore) deleteAt(ctx context.Context, id string, want uint64) error {
	n, rev, err := s.get(ctx, id)
	if err != nil {
		return err
	}
	if want != 0 && rev != want {
		return fmt.Errorf("registry delete %s at revision %d: at %d now: %w", id, want, rev, ErrConflict)
	}
	if err := s.kv.Purge(ctx, "node."+id, jetstream.LastRevision(rev)); err != nil {
		if isWrongRevision(err) {
			return fmt.Errorf("registry delete %s: %w", id, ErrConflict)
		}
		return fmt.Errorf("registry delete %s: %w", id, err)
	}
	s.releaseAt(ctx, nameKey(n.Node), id, n.NameClaim)
	s.releaseAt(ctx, addrKey(n.Node), id, n.AddrClaim)
	return nil
}

// lastRevision is the bucket's last revision, as the stream's leader
// has it: at or past its last change to a node. The watch, which sees
// every key, reaches it once it delivered every change made before this
// call: a write's message stays until a later write of its key replaces
// it (no TTL, no message deletes), so that one, or a later one, reaches
// the watch. The stream's state keeps it, so reading it costs the server the
// same for any number of nodes; the last message over node.> would cost
// it a walk of every node's subject.
func (s *KVStore) lastRevision(ctx context.Context) (uint64, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("registry last revision: %w", err)
	}
	if c := info.Created.UnixNano(); c > 0 {
		s.created.Store(uint64(c))
	}
	return info.State.LastSeq, nil
}

// Watch calls apply with every node in the bucket, then with every later
// change (n nil: id was deleted) by any instance, in the bucket's order,
// until ctx ends; ready runs once the nodes stored now were delivered,
// and seen after each entry of the bucket (claims too), applied or not (a
// corrupt one is skipped), with its revision. It returns once the watch
// is set up; the updates arrive on a goroutine that ends with ctx.
func (s *KVStore) Watch(ctx context.Context, apply func(id string, n *Node, rev uint64), seen func(rev uint64), ready func()) (stopped <-chan struct{}, err error) {
	// Every key, not node.> alone: seen then follows the stream itself,
	// up to its last revision (lastRevision).
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("registry watch: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					ready()
					continue
				}
				id, isNode := strings.CutPrefix(e.Key(), "node.")
				var n Node
				switch {
				case !isNode:
					// a claim or the shared secret
				case e.Operation() != jetstream.KeyValuePut:
					apply(id, nil, e.Revision())
				case json.Unmarshal(e.Value(), &n) != nil || n.ID != id:
					// corrupt: Get reports it to whoever asks
				default:
					apply(id, &n, e.Revision())
				}
				seen(e.Revision())
			}
		}
	}()
	return done, nil
}

func (s *KVStore) Close() error { return nil }

// controlSecretKey holds the secret every control instance sharing the
// bucket derives registration challenges from.
const controlSecretKey = "control.challenge-secret"

var _ secretKeeper = (*KVStore)(nil)

// ControlSecret returns the bucket's shared secret; the first instance
// to ask creates it (an atomic create, so all agree on one).
func (s *KVStore) ControlSecret(ctx context.Context) ([]byte, error) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	_, err := s.kv.Create(ctx, controlSecretKey, b)
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, fmt.Errorf("registry create %s: %w", controlSecretKey, err)
	}
	// On a cluster forming, the key another instance just created may
	// not be readable at once from here: ask again for a few seconds.
	var e jetstream.KeyValueEntry
	for try := 0; ; try++ {
		e, err = s.kv.Get(ctx, controlSecretKey)
		if err == nil || !errors.Is(err, jetstream.ErrKeyNotFound) || try == 50 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("registry get %s: %w", controlSecretKey, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("registry get %s: %w", controlSecretKey, err)
	}
	if len(e.Value()) != 32 {
		return nil, fmt.Errorf("registry entry %s is %d bytes, want 32", controlSecretKey, len(e.Value()))
	}
	return e.Value(), nil
}
