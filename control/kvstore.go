package control

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KVStore is a Store in a NATS JetStream key-value bucket, so several
// control instances can share one registry and stay stateless. Addresses
// and names are claimed with atomic creates of "addr.<address>" and
// "name.<name>" keys, so two instances can never hand out the same one;
// nodes live under "node.<id>".
type KVStore struct {
	kv jetstream.KeyValue
}

var _ Store = (*KVStore)(nil)

// OpenKVStore opens (creating if needed) the bucket on nc's JetStream.
func OpenKVStore(ctx context.Context, nc *nats.Conn, bucket string) (*KVStore, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("registry bucket %s: %w", bucket, err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "Lattice control registry",
		History:     1,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("registry bucket %s: %w", bucket, err)
	}
	return &KVStore{kv: kv}, nil
}

func addrKey(n *Node) string {
	return "addr." + strings.ReplaceAll(n.Address.Addr().String(), ".", "-")
}
func nameKey(n *Node) string { return "name." + n.Name }

func (s *KVStore) Get(ctx context.Context, id string) (*Node, error) {
	e, err := s.kv.Get(ctx, "node."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("registry get %s: %w", id, err)
	}
	var n Node
	if err := json.Unmarshal(e.Value(), &n); err != nil {
		return nil, fmt.Errorf("registry entry %s is corrupt: %w", id, err)
	}
	return &n, nil
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

// claim atomically creates key with value id; a key already holding id
// (a retried create) counts as claimed.
func (s *KVStore) claim(ctx context.Context, key, id string) (bool, error) {
	_, err := s.kv.Create(ctx, key, []byte(id))
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return false, fmt.Errorf("registry claim %s: %w", key, err)
	}
	e, err := s.kv.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("registry claim %s: %w", key, err)
	}
	return string(e.Value()) == id, nil
}

func (s *KVStore) Create(ctx context.Context, n *Node) error {
	ok, err := s.claim(ctx, addrKey(n), n.ID)
	if err != nil {
		return err
	}
	if !ok {
		return ErrAddressTaken
	}
	ok, err = s.claim(ctx, nameKey(n), n.ID)
	if err == nil && !ok {
		err = ErrNameTaken
	}
	if err == nil {
		err = s.put(ctx, n)
	}
	if err != nil {
		_ = s.kv.Purge(ctx, addrKey(n))
		return err
	}
	return nil
}

func (s *KVStore) put(ctx context.Context, n *Node) error {
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("registry put %s: %w", n.ID, err)
	}
	if _, err := s.kv.Put(ctx, "node."+n.ID, b); err != nil {
		return fmt.Errorf("registry put %s: %w", n.ID, err)
	}
	return nil
}

func (s *KVStore) Update(ctx context.Context, n *Node) error {
	old, err := s.Get(ctx, n.ID)
	if err != nil {
		return err
	}
	if old.Address != n.Address || old.Name != n.Name {
		return fmt.Errorf("control: update of %s changes its address or name", n.ID)
	}
	return s.put(ctx, n)
}

func (s *KVStore) Delete(ctx context.Context, id string) error {
	n, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	for _, k := range []string{"node." + id, nameKey(n), addrKey(n)} {
		if err := s.kv.Purge(ctx, k); err != nil {
			return fmt.Errorf("registry delete %s: %w", k, err)
		}
	}
	return nil
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
	e, err := s.kv.Get(ctx, controlSecretKey)
	if err != nil {
		return nil, fmt.Errorf("registry get %s: %w", controlSecretKey, err)
	}
	if len(e.Value()) != 32 {
		return nil, fmt.Errorf("registry entry %s is %d bytes, want 32", controlSecretKey, len(e.Value()))
	}
	return e.Value(), nil
}
