package policy

import (
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Path is the policy file. Required.
	Path string
	// Interval is how often the file is checked for changes. If zero, 1s.
	Interval time.Duration
	// Logger receives reloads and rejected files. If nil, logs are
	// discarded.
	Logger *slog.Logger
	// OnChange, if set, is called with each newly installed policy (not
	// the initial one), after Current returns it. Calls are serialized and
	// in install order; they run on the Watcher's goroutine or on Reload's
	// caller with the Watcher's lock held, so OnChange must not call
	// Reload or Close.
	OnChange func(*Policy)
	// Overlay is the overlay prefix passed to Policy.WithOverlay. If zero,
	// DefaultOverlay.
	Overlay netip.Prefix
}

// racyWindow is how close to a read a file's mtime must be for the read to
// be suspect: a write within the file system's timestamp granularity of our
// read can leave size and mtime unchanged, so such files are re-read (and
// re-hashed) on every tick until their mtime is comfortably in the past.
const racyWindow = 2 * time.Second

// Watcher keeps a policy file loaded, reloading it when it changes or when
// Reload is called. A file that fails to load is logged with its errors and
// the policy in force stays in force.
type Watcher struct {
	cfg WatcherConfig
	log *slog.Logger
	cur atomic.Pointer[Policy]
	// polls counts completed polls, for tests to wait on.
	polls atomic.Uint64

	mu      sync.Mutex // guards the following fields
	seen    fileState  // the file as last acted on, valid or not
	pending *[32]byte  // hash of new bytes seen once, waiting to settle
	closed  bool

	closeOnce sync.Once
	done      chan struct{}
	wg        sync.WaitGroup
}

// fileState identifies a version of the file cheaply (stat) and exactly
// (hash).
type fileState struct {
	info   os.FileInfo // nil until a read succeeded
	hash   [32]byte
	readAt time.Time
	failed string // the read error last logged, to log a lasting one once
}

// unchanged reports whether info is, by stat alone, certainly the file
// s was read from.
func (s *fileState) unchanged(info os.FileInfo) bool {
	return s.info != nil && os.SameFile(s.info, info) &&
		s.info.Size() == info.Size() && s.info.ModTime().Equal(info.ModTime()) &&
		info.ModTime().Before(s.readAt.Add(-racyWindow))
}

// NewWatcher loads cfg.Path and starts watching it. It fails, starting
// nothing, when the file cannot be loaded: a sandbox should not start with
// a policy other than the one configured.
func NewWatcher(cfg WatcherConfig) (*Watcher, error) {
	if cfg.Path == "" {
		return nil, fmt.Errorf("%w: empty Path", ErrInvalidConfig)
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("%w: negative Interval %v", ErrInvalidConfig, cfg.Interval)
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if !cfg.Overlay.IsValid() {
		cfg.Overlay = DefaultOverlay
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{
		cfg:  cfg,
		log:  log.With("component", "policy", "path", cfg.Path),
		done: make(chan struct{}),
	}
	data, st, err := w.read()
	if err != nil {
		return nil, err
	}
	p, err := Parse(cfg.Path, data)
	if err != nil {
		return nil, err
	}
	w.seen = st
	w.cur.Store(p.WithOverlay(cfg.Overlay))
	w.log.Info("policy loaded", "policy", p.String())
	w.wg.Add(1)
	go w.loop()
	return w, nil
}

// Current returns the policy in force. It never returns nil.
func (w *Watcher) Current() *Policy { return w.cur.Load() }

// Reload re-reads the file now, whatever its stat says, and without waiting
// for it to settle (for SIGHUP: the operator says the file is ready). When
// the file is unreadable or invalid it returns the error, logs it, and the
// policy in force stays; when it is unchanged Reload does nothing.
func (w *Watcher) Reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	data, st, err := w.read()
	if err != nil {
		w.log.Error("policy reload failed; keeping the policy in force", "err", err, "policy", w.Current().String())
		return err
	}
	w.seen, w.pending = st, nil
	return w.installLocked(data)
}

// Close stops watching. Current keeps returning the last policy. It is
// idempotent and returns nil.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		close(w.done)
		w.wg.Wait()
	})
	return nil
}

func (w *Watcher) loop() {
	defer w.wg.Done()
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
			w.poll()
		}
	}
}

// poll reloads the file if it changed since it was last read and the new
// bytes have settled: read the same on two polls in a row. A file written in
// place (truncated, then written) can be caught empty or half-written, and
// either may be a valid policy that allows more than the whole file.
func (w *Watcher) poll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.polls.Add(1)
	if w.closed {
		return
	}
	info, err := os.Stat(w.cfg.Path)
	if err == nil && w.pending == nil && w.seen.unchanged(info) {
		return
	}
	var data []byte
	var st fileState
	if err == nil {
		data, st, err = w.read()
	}
	if err != nil {
		w.pending = nil
		// Editors replace files by rename; a brief absence is normal, so
		// log a lasting one once and forget the stat so that the file is
		// re-read when it returns.
		if msg := err.Error(); msg != w.seen.failed {
			w.seen.failed = msg
			w.seen.info = nil
			w.log.Warn("policy file unreadable; keeping the policy in force", "err", err, "policy", w.Current().String())
		}
		return
	}
	if st.hash == w.seen.hash && w.seen.failed == "" {
		w.pending = nil
		w.seen = st // same bytes: only the stat changed
		return
	}
	if w.pending == nil || *w.pending != st.hash {
		w.pending = &st.hash // new bytes: wait one Interval for them to settle
		return
	}
	w.pending = nil
	w.seen = st
	_ = w.installLocked(data) // logged
}

// installLocked parses data and, if valid and different from the policy in
// force, installs it and calls OnChange.
func (w *Watcher) installLocked(data []byte) error {
	old := w.Current()
	p, err := Parse(w.cfg.Path, data)
	if err != nil {
		w.log.Error("policy file rejected; keeping the policy in force", "err", err, "policy", old.String())
		return err
	}
	if p.Digest() == old.Digest() {
		w.log.Info("policy unchanged", "policy", old.String())
		return nil
	}
	p = p.WithOverlay(w.cfg.Overlay)
	w.cur.Store(p)
	w.log.Info("policy reloaded", "policy", p.String(), "previous", old.String())
	if w.cfg.OnChange != nil {
		w.cfg.OnChange(p)
	}
	return nil
}

// read reads the file and describes the version read.
func (w *Watcher) read() ([]byte, fileState, error) {
	readAt := time.Now()
	data, info, err := readFile(w.cfg.Path)
	if err != nil {
		return nil, fileState{}, err
	}
	return data, fileState{info: info, hash: sha256.Sum256(data), readAt: readAt}, nil
}
