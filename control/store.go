package control

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sync"

	"github.com/latticelab/lattice/internal/atomicfile"
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
	// node holds n.Address, ErrNameTaken if another node has n.Name,
	// ErrExists if n.ID is registered already.
	Create(ctx context.Context, n *Node) error
	// Update replaces a stored node; its ID, address and name must not
	// change.
	Update(ctx context.Context, n *Node) error
	// Delete removes a node and frees its address and name.
	Delete(ctx context.Context, id string) error
	// Close releases the store.
	Close() error
}

// revisionDeleter is an ability of a Store several instances share: a
// registration whose answer was lost deletes the record it created, not
// one another instance wrote since under the same ID. A store of one
// instance needs none: registrations of an ID hold its lock (idLock)
// from the create through the undo, so nothing writes it in between.
type revisionDeleter interface {
	// deleteAt deletes id's record, and frees the claims it holds, if
	// it is at revision rev (Node.rev, as Create set it); ErrConflict if
	// it changed since, ErrNotFound if there is none.
	deleteAt(ctx context.Context, id string, rev uint64) error
}

// FileStore is a Store in a JSON snapshot file and an append-only
// journal beside it (journal.go), both mode 0600: they hold hashes of
// node secrets. A change is acknowledged once its journal line is
// fsynced; concurrent changes share one fsync. For one control instance.
type FileStore struct {
	path string
	opts FileStoreOptions
	// compactMu is held through a compaction (taken before mu): one runs
	// at a time, and Close waits for it.
	compactMu sync.Mutex
	// compactHook, if not nil, runs at each step of Compact (tests crash
	// or change the store there); "journal" runs with mu held.
	compactHook func(step string)
	mu          sync.Mutex // guards the following fields
	secret      []byte     // ControlSecret's, once read or made
	byID        map[string]*Node
	// claims: address and name → the ID holding it, so Create checks
	// without scanning.
	byAddr map[netip.Prefix]string
	byName map[string]string

	j         *journal // nil: NewMemStore
	compactAt int64    // journal size that triggers a snapshot
	recovered error    // a torn tail dropped at open (*TornTailError)
	closed    bool
}

var _ Store = (*FileStore)(nil)

// FileStoreOptions configure OpenFileStoreWith.
type FileStoreOptions struct {
	// Logger gets compaction failures and a torn journal tail. If nil,
	// they are not logged (Recovered still reports the tail).
	Logger *slog.Logger
	// CompactBytes is the least journal size that triggers a snapshot;
	// past it, a snapshot is written once the journal outgrows twice the
	// last one. If zero, 1 MiB.
	CompactBytes int64
}

// NewMemStore is a FileStore without a file: the registry lives in memory
// and is gone when the process exits. For tests and labs whose registry
// need not outlive them.
func NewMemStore() *FileStore { return newFileStore("") }

func newFileStore(path string) *FileStore {
	return &FileStore{path: path, byID: map[string]*Node{}, byAddr: map[netip.Prefix]string{}, byName: map[string]string{}}
}

type fileState struct {
	Version int     `json:"version"`
	Nodes   []*Node `json:"nodes"`
}

// JournalPath is the journal of the registry file path.
func JournalPath(path string) string { return path + ".journal" }

// SecretPath is where a FileStore at path keeps control's secret.
func SecretPath(path string) string { return path + ".secret" }

// controlSecretBytes is the size of control's secret.
const controlSecretBytes = 32

// ControlSecret returns control's secret, behind its challenges and its
// register key (see stamper), made on first use and kept beside the
// registry (SecretPath, 0600, written atomically): a restarted control
// keeps its register key, so the key in nodes' control URLs (and the one
// they learnt from their last registration) still gives them
// registration in one request. A file of the wrong size is an error
// naming it, and is left as it is. A memory store keeps its secret in
// memory.
func (s *FileStore) ControlSecret(context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.secret != nil {
		return bytes.Clone(s.secret), nil
	}
	if s.path == "" { // NewMemStore: kept as long as the store
		s.secret = make([]byte, controlSecretBytes)
		_, _ = rand.Read(s.secret)
		return bytes.Clone(s.secret), nil
	}
	path := SecretPath(s.path)
	b, err := os.ReadFile(path)
	switch {
	case err == nil && len(b) != controlSecretBytes:
		return nil, fmt.Errorf("control secret %s: %d bytes, want %d (remove it to make a new one: nodes then register in two requests until they learn the new key)", path, len(b), controlSecretBytes)
	case errors.Is(err, os.ErrNotExist):
		b = make([]byte, controlSecretBytes)
		_, _ = rand.Read(b)
		if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
			return nil, fmt.Errorf("control secret: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("control secret: %w", err)
	}
	s.secret = b
	return bytes.Clone(b), nil
}

// OpenFileStore is OpenFileStoreWith without options.
func OpenFileStore(path string) (*FileStore, error) {
	return OpenFileStoreWith(path, FileStoreOptions{})
}

// OpenFileStoreWith opens or creates the store at path: the snapshot,
// then its journal replayed over it. A file that cannot be parsed is an
// error naming it (and, in the journal, the offset), and both are left
// untouched; a torn last journal record is dropped (see Recovered).
func OpenFileStoreWith(path string, o FileStoreOptions) (*FileStore, error) {
	if o.CompactBytes <= 0 {
		o.CompactBytes = 1 << 20
	}
	s := newFileStore(path)
	s.opts = o
	snap, err := s.loadSnapshot()
	if err != nil {
		return nil, err
	}
	jpath := JournalPath(path)
	b, err := os.ReadFile(jpath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open registry journal %s: %w", jpath, err)
	}
	recs, good, err := parseJournal(jpath, b)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.Put != nil {
			s.byID[r.Put.ID] = r.Put
		} else {
			delete(s.byID, r.Del)
		}
	}
	if err := s.claimAll(); err != nil {
		return nil, err
	}
	if good < len(b) {
		if err := s.dropTornTail(jpath, b, good); err != nil {
			return nil, err
		}
	}
	if s.j, err = openJournal(jpath, int64(good)); err != nil {
		return nil, err
	}
	s.compactAt = max(o.CompactBytes, 2*snap)
	return s, nil
}

// loadSnapshot reads the snapshot file, if any, and returns its size.
func (s *FileStore) loadSnapshot() (int64, error) {
	b, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("open registry %s: %w", s.path, err)
	}
	var st fileState
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, fmt.Errorf("registry %s is corrupt (left as is): %w", s.path, err)
	}
	if st.Version != 1 {
		return 0, fmt.Errorf("registry %s: unsupported version %d", s.path, st.Version)
	}
	for _, n := range st.Nodes {
		if n == nil || n.ID == "" {
			return 0, fmt.Errorf("registry %s: a node without an id", s.path)
		}
		s.byID[n.ID] = n
	}
	return int64(len(b)), nil
}

// claimAll indexes every node's address and name, once the journal is
// replayed (a replay passes through states the snapshot already moved
// past, in which two records may hold one address).
func (s *FileStore) claimAll() error {
	for _, id := range slices.Sorted(maps.Keys(s.byID)) {
		n := s.byID[id]
		if o, ok := s.byAddr[n.Address]; ok {
			return fmt.Errorf("registry %s (and its journal): nodes %s and %s both hold address %v", s.path, o, id, n.Address)
		}
		if o, ok := s.byName[n.Name]; ok {
			return fmt.Errorf("registry %s (and its journal): nodes %s and %s both have name %q", s.path, o, id, n.Name)
		}
		s.byAddr[n.Address], s.byName[n.Name] = id, id
	}
	return nil
}

// dropTornTail keeps b[good:] in a file of its own, then cuts the journal
// at good.
func (s *FileStore) dropTornTail(jpath string, b []byte, good int) error {
	e := &TornTailError{Path: jpath, Offset: int64(good), Bytes: len(b) - good, Kept: fmt.Sprintf("%s.torn-%d", jpath, good)}
	if err := atomicfile.WriteFile(e.Kept, b[good:], 0o600); err != nil {
		return fmt.Errorf("registry journal %s:%d: keep the torn tail: %w", jpath, good, err)
	}
	if err := os.Truncate(jpath, int64(good)); err != nil {
		return fmt.Errorf("registry journal %s:%d: cut the torn tail: %w", jpath, good, err)
	}
	s.recovered = e
	if s.opts.Logger != nil {
		s.opts.Logger.Warn("registry journal: torn tail dropped", "err", e)
	}
	return nil
}

// Recovered is the torn journal tail dropped at open (a *TornTailError),
// nil if there was none.
func (s *FileStore) Recovered() error { return s.recovered }

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
	if _, ok := s.byID[n.ID]; ok {
		s.mu.Unlock()
		return ErrExists
	}
	if id, ok := s.byAddr[n.Address]; ok && id != n.ID {
		s.mu.Unlock()
		return ErrAddressTaken
	}
	if id, ok := s.byName[n.Name]; ok && id != n.ID {
		s.mu.Unlock()
		return ErrNameTaken
	}
	return s.commit(n.ID, n)
}

func (s *FileStore) Update(_ context.Context, n *Node) error {
	s.mu.Lock()
	o, ok := s.byID[n.ID]
	switch {
	case !ok:
		s.mu.Unlock()
		return ErrNotFound
	case o.Address != n.Address || o.Name != n.Name:
		s.mu.Unlock()
		return fmt.Errorf("control: update of %s changes its address or name", n.ID)
	}
	return s.commit(n.ID, n)
}

func (s *FileStore) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	if _, ok := s.byID[id]; !ok {
		s.mu.Unlock()
		return ErrNotFound
	}
	return s.commit(id, nil)
}

// Close writes the registry as one snapshot, empties the journal and
// closes it; the store takes no more changes. If the snapshot cannot be
// written, the journal keeps every change.
func (s *FileStore) Close() error {
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.j == nil {
		return nil
	}
	s.closed = true
	err := s.j.failed()
	if err == nil {
		err = s.compactNowLocked()
	}
	return errors.Join(err, s.j.close())
}

// commit applies a change (n nil: delete id), called with s.mu held, which
// it releases: the journal line is written under it, and its fsync, which
// concurrent changes share, waited for outside it. On a failed write the
// change is undone, so memory and disk agree; after a failed fsync the
// store takes no more changes.
func (s *FileStore) commit(id string, n *Node) error {
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("registry %s: closed", s.path)
	}
	old, had := s.byID[id]
	s.setLocked(id, n)
	if s.j == nil { // NewMemStore
		s.mu.Unlock()
		return nil
	}
	end, err := s.appendLocked(id, n)
	if err != nil {
		if had {
			s.setLocked(id, old)
		} else {
			s.setLocked(id, nil)
		}
		s.mu.Unlock()
		return err
	}
	compact := s.j.size >= s.compactAt
	s.mu.Unlock()
	if err := s.j.syncTo(end); err != nil {
		return err
	}
	if compact && s.compactMu.TryLock() { // else one is running
		s.compactOrLog()
		s.compactMu.Unlock()
	}
	return nil
}

func (s *FileStore) appendLocked(id string, n *Node) (int64, error) {
	r := journalRecord{Put: n}
	if n == nil {
		r.Del = id
	}
	line, err := encodeRecord(r)
	if err != nil {
		return 0, err
	}
	return s.j.append(line)
}

// compactOrLog compacts (with compactMu held) for the change that took
// the journal past compactAt, after that change is durable: that change
// waits for the snapshot, the others go on. If compaction fails the
// journal keeps everything, and the next try waits for it to double.
func (s *FileStore) compactOrLog() {
	err := s.compactOffLock()
	if err == nil {
		return
	}
	s.mu.Lock()
	s.compactAt = 2 * s.j.size
	size := s.j.size
	s.mu.Unlock()
	if s.opts.Logger != nil {
		s.opts.Logger.Error("registry compaction failed; the journal keeps every change", "err", err, "journal_bytes", size)
	}
}

// Compact writes the registry as a new snapshot and leaves in the journal
// only the changes made while it was written (see journal.go for the
// steps and why a crash at any of them loses nothing). Changes go on
// meanwhile; one compaction runs at a time.
func (s *FileStore) Compact() error {
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	return s.compactOffLock()
}

// compactOffLock is Compact, with compactMu held.
func (s *FileStore) compactOffLock() error {
	hook := func(string) {}
	if s.compactHook != nil {
		hook = s.compactHook
	}
	s.mu.Lock()
	if s.j == nil || s.closed {
		s.mu.Unlock()
		return nil
	}
	if err := s.j.failed(); err != nil {
		s.mu.Unlock()
		return err // memory may hold changes that were refused
	}
	// Records are replaced, never changed in place (setLocked), so a
	// copy of the map is a consistent registry to write.
	nodes := maps.Clone(s.byID)
	upTo := s.j.keepTail()
	s.mu.Unlock()

	hook("copied")
	size, err := s.writeSnapshot(nodes, upTo)
	if err == nil {
		hook("snapshot")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		err = s.j.swapTail(func() { hook("journal") })
	}
	if err != nil {
		s.j.dropTail()
		return err
	}
	s.compactAt = max(s.opts.CompactBytes, 2*size)
	return nil
}

// writeSnapshot writes nodes (a copy of the registry when the journal had
// upTo bytes) as the snapshot, outside the store's mutex. The journal is
// made durable up to there first: the snapshot must not hold a change
// whose fsync then fails, and is refused to its caller.
func (s *FileStore) writeSnapshot(nodes map[string]*Node, upTo int64) (int64, error) {
	if err := s.j.syncTo(upTo); err != nil {
		return 0, err
	}
	b, err := encodeSnapshot(nodes)
	if err != nil {
		return 0, err
	}
	return int64(len(b)), atomicfile.WriteFile(s.path, b, 0o600)
}

func (s *FileStore) compactNowLocked() error {
	size, err := s.writeSnapshotLocked(s.path)
	if err != nil {
		return err
	}
	if err := s.j.reset(); err != nil {
		return err
	}
	s.compactAt = max(s.opts.CompactBytes, 2*size)
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

// writeSnapshotLocked writes every node to path atomically and returns
// the snapshot's size.
func (s *FileStore) writeSnapshotLocked(path string) (int64, error) {
	b, err := encodeSnapshot(s.byID)
	if err != nil {
		return 0, err
	}
	return int64(len(b)), atomicfile.WriteFile(path, b, 0o600)
}

// encodeSnapshot is the snapshot file holding nodes, sorted by ID.
func encodeSnapshot(nodes map[string]*Node) ([]byte, error) {
	st := fileState{Version: 1}
	for _, id := range slices.Sorted(maps.Keys(nodes)) {
		st.Nodes = append(st.Nodes, nodes[id])
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode registry: %w", err)
	}
	return b, nil
}
