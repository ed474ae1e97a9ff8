package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Store errors.
var (
	ErrNotFound     = errors.New("control: node not found")
	ErrAddressTaken = errors.New("control: address taken")
	ErrNameTaken    = errors.New("control: name taken")
	// ErrExists: Create found the node's ID registered meanwhile.
	ErrExists = errors.New("control: node registered meanwhile")
	// ErrConflict: Update or Delete found the record changed since it
	// was read (another instance wrote it); read it again.
	ErrConflict = errors.New("control: node changed meanwhile")
)

// Store keeps the registry. Implementations are safe for concurrent use;
// Create and Update are atomic with respect to the address and name they
// claim, so several control instances may share a store.
type Store interface {
	// Get returns the node with id, or ErrNotFound.
	Get(ctx context.Context, id string) (*Node, error)
	// List returns every node.
	List(ctx context.Context) ([]*Node, error)
	// Create stores a new node. It fails with ErrAddressTaken if another
	// node holds n.Address, ErrNameTaken if another node has n.Name.
	Create(ctx context.Context, n *Node) error
	// Update replaces a stored node; its ID, address and name must not
	// change.
	Update(ctx context.Context, n *Node) error
	// Delete removes a node and frees its address and name.
	Delete(ctx context.Context, id string) error
	// Close releases the store.
	Close() error
}

// FileStore is a Store in one JSON file, rewritten atomically (temporary
// file, fsync, rename) on every change, with mode 0600: it holds hashes of
// node secrets. For one control instance.
type FileStore struct {
	path string
	mu   sync.Mutex // guards the following fields
	byID map[string]*Node
	// claims: address and name → the ID holding it, so Create checks
	// without scanning.
	byAddr map[netip.Prefix]string
	byName map[string]string
}

var _ Store = (*FileStore)(nil)

// NewMemStore is a FileStore without a file: the registry lives in memory
// and is gone when the process exits. For tests and labs whose registry is
// large or need not outlive them (a FileStore rewrites and fsyncs its
// whole file on every change).
func NewMemStore() *FileStore { return newFileStore("") }

func newFileStore(path string) *FileStore {
	return &FileStore{path: path, byID: map[string]*Node{}, byAddr: map[netip.Prefix]string{}, byName: map[string]string{}}
}

type fileState struct {
	Version int     `json:"version"`
	Nodes   []*Node `json:"nodes"`
}

// OpenFileStore opens or creates the store at path. A file that cannot be
// parsed is an error naming it, and is left untouched.
func OpenFileStore(path string) (*FileStore, error) {
	s := newFileStore(path)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	}
	var st fileState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("registry %s is corrupt (left as is): %w", path, err)
	}
	if st.Version != 1 {
		return nil, fmt.Errorf("registry %s: unsupported version %d", path, st.Version)
	}
	for _, n := range st.Nodes {
		if n == nil || n.ID == "" {
			return nil, fmt.Errorf("registry %s: a node without an id", path)
		}
		s.byID[n.ID] = n
		s.byAddr[n.Address], s.byName[n.Name] = n.ID, n.ID
	}
	return s, nil
}

func (s *FileStore) Get(_ context.Context, id string) (*Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.byID[id]
	if !ok {
		return nil, ErrNotFound
	}
	c := *n
	return &c, nil
}

func (s *FileStore) List(context.Context) ([]*Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Node, 0, len(s.byID))
	for _, id := range slices.Sorted(maps.Keys(s.byID)) {
		c := *s.byID[id]
		out = append(out, &c)
	}
	return out, nil
}

func (s *FileStore) Create(_ context.Context, n *Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.byAddr[n.Address]; ok && id != n.ID {
		return ErrAddressTaken
	}
	if id, ok := s.byName[n.Name]; ok && id != n.ID {
		return ErrNameTaken
	}
	return s.commitLocked(n.ID, n)
}

func (s *FileStore) Update(_ context.Context, n *Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.byID[n.ID]
	if !ok {
		return ErrNotFound
	}
	if o.Address != n.Address || o.Name != n.Name {
		return fmt.Errorf("control: update of %s changes its address or name", n.ID)
	}
	return s.commitLocked(n.ID, n)
}

func (s *FileStore) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[id]; !ok {
		return ErrNotFound
	}
	return s.commitLocked(id, nil)
}

func (s *FileStore) Close() error { return nil }

// commitLocked applies a change (n nil: delete id) and writes the file; on
// a write error the change is undone, so memory and disk agree.
func (s *FileStore) commitLocked(id string, n *Node) error {
	old, had := s.byID[id]
	s.setLocked(id, n)
	if err := s.writeLocked(); err != nil {
		if had {
			s.setLocked(id, old)
		} else {
			s.setLocked(id, nil)
		}
		return err
	}
	return nil
}

// setLocked makes id's record n (nil: none), claims included.
func (s *FileStore) setLocked(id string, n *Node) {
	if o, ok := s.byID[id]; ok {
		delete(s.byAddr, o.Address)
		delete(s.byName, o.Name)
		delete(s.byID, id)
	}
	if n != nil {
		c := *n
		s.byID[id] = &c
		s.byAddr[c.Address], s.byName[c.Name] = id, id
	}
}

func (s *FileStore) writeLocked() error {
	if s.path == "" {
		return nil // NewMemStore
	}
	st := fileState{Version: 1}
	for _, id := range slices.Sorted(maps.Keys(s.byID)) {
		st.Nodes = append(st.Nodes, s.byID[id])
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode registry: %w", err)
	}
	return WriteFileAtomic(s.path, b, 0o600)
}

// WriteFileAtomic writes b to path so that a reader sees the old or the
// new content, never a mix, and the new content survives a crash: a
// temporary file in the same directory, fsync, rename, fsync of the
// directory.
func WriteFileAtomic(path string, b []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing to remove
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
